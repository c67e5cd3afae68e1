package jobs

import (
	"errors"
	"strings"
	"testing"
)

func TestParsePullRequestText(t *testing.T) {
	got, err := ParsePullRequestText([]byte("# Fix the parser\r\n\r\nIt now reads tabs.\n"))
	if err != nil || got != (PullRequestText{Title: "Fix the parser", Body: "It now reads tabs."}) {
		t.Fatalf("%+v %v", got, err)
	}
	for name, in := range map[string]string{
		"empty":      "",
		"blank":      "\n\n  \n",
		"control":    "Title\nbody \x1b[31m red",
		"zero-width": "Ti\u200btle\nbody",
		"bidi":       "Title \u202e\nbody",
		"long title": strings.Repeat("t", MaxPullRequestTitle+1) + "\nbody",
		"too large":  "Title\n" + strings.Repeat("b", MaxPullRequestBytes),
		"not utf-8":  "Title\n\xff",
	} {
		if _, err := ParsePullRequestText([]byte(in)); !errors.Is(err, ErrBadOutput) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
}
