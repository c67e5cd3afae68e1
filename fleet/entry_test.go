package fleet_test

import (
	"testing"

	"github.com/pidispatch/pidispatch/fleet"
)

func TestEntrySignatureBindsTheStreamAndEveryField(t *testing.T) {
	k, err := fleet.NewKey([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{"e": `{"t":1,"k":"out","line":"hello"}`}
	sig, err := k.SignEntry("runs:live:job-1", fields)
	if err != nil {
		t.Fatal(err)
	}
	if len(sig) != fleet.SignatureLen || !k.VerifyEntry("runs:live:job-1", fields, sig) {
		t.Fatalf("the writer's own entry does not verify: %q", sig)
	}
	other, _ := fleet.NewKey([]byte("another key, another fleet, 32 b"))
	changed := map[string]string{"e": `{"t":1,"k":"out","line":"rm -rf"}`}
	extra := map[string]string{"e": fields["e"], "x": "1"}
	for name, ok := range map[string]bool{
		"another stream":  k.VerifyEntry("runs:live:job-2", fields, sig),
		"another line":    k.VerifyEntry("runs:live:job-1", changed, sig),
		"a field added":   k.VerifyEntry("runs:live:job-1", extra, sig),
		"another key":     other.VerifyEntry("runs:live:job-1", fields, sig),
		"no signature":    k.VerifyEntry("runs:live:job-1", fields, ""),
		"no key verifies": fleet.Key{}.VerifyEntry("runs:live:job-1", fields, sig),
	} {
		if ok {
			t.Errorf("%s: verified", name)
		}
	}
	if _, err := (fleet.Key{}).SignEntry("s", fields); err == nil {
		t.Error("the zero key signed")
	}
	// Not a job's or a row's signature either.
	if k.VerifyRow(fields, sig) {
		t.Error("an entry's signature verified as a row's")
	}
}
