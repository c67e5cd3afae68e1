package dispatch_test

import (
	"testing"

	"github.com/pidispatch/pidispatch/dispatch/policy"
)

// mustPauseWindows parses a pause-windows document.
func mustPauseWindows(t *testing.T, doc string) policy.PauseWindows {
	t.Helper()
	w, err := policy.ParsePauseWindows([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// mustScopedLimits parses a scoped-limits document.
func mustScopedLimits(t *testing.T, doc string) policy.ScopedLimits {
	t.Helper()
	l, err := policy.ParseScopedLimits([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return l
}
