package jobs

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/hostileid"
)

// FuzzJobIDNames holds the names a job id maps to: a safe, bounded stem that
// no other id shares, a record name that splits back into it and the
// attempt, and a refusal record that is valid whatever the id.
func FuzzJobIDNames(f *testing.F) {
	for _, id := range hostileid.IDs() {
		f.Add(id, id+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		sa := SanitizeJobID(a)
		if sa == "" || len(sa) > maxPlainStem || sa[0] == '.' || strings.ContainsFunc(sa, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-~", r))
		}) {
			t.Fatalf("stem %q of %q", sa, a)
		}
		if a != b && sa == SanitizeJobID(b) {
			t.Fatalf("%q and %q share the stem %q", a, b, sa)
		}
		q, stem, n, ok := parseRecordName(RecordName("pi-jobs@w-1", a, 7))
		if !ok || q != "pi-jobs@w-1" || stem != sa || n != 7 {
			t.Fatalf("RecordName(pi-jobs@w-1, %q, 7) splits into %q %q %d %v", a, q, stem, n, ok)
		}
		q, stem, n, ok = parseRecordName(RecordName("", a, 7))
		if !ok || q != "" || stem != sa || n != 7 {
			t.Fatalf("RecordName(\"\", %q, 7) splits into %q %q %d %v", a, q, stem, n, ok)
		}
		id, quoted := RefusedJobID(a)
		now := time.Now()
		rec := Record{JobID: id, JobIDQuoted: quoted, StartedAt: now, EndedAt: now, Outcome: OutcomeFailed,
			Reason: ReasonInvalidJob, Attempt: 1, Host: "h"}
		if err := rec.Validate(); err != nil {
			t.Fatalf("refusal record of %q: %v", a, err)
		}
		if (quoted == "") != (fleet.CheckJobID(a) == nil) || (quoted == "" && id != a) {
			t.Fatalf("RefusedJobID(%q) = %q, %q", a, id, quoted)
		}
		if quoted != "" && len(a) < 200 {
			if back, err := strconv.Unquote(quoted); err != nil || back != a {
				t.Fatalf("quoted %q of %q does not read back: %q %v", quoted, a, back, err)
			}
		}
	})
}
