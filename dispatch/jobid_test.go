package dispatch

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/container"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/livetest"
	"github.com/pidispatch/pidispatch/queue"
)

// hostileIDs are job ids of every shape an entrance may see: lengths 0 to
// 2000, every control character, invalid UTF-8, ':@#/' and unicode, and
// seeded random bytes.
func hostileIDs() []string {
	var ids []string
	for _, n := range []int{0, 1, 2, 100, 200, 201, 255, 256, 257, 300, 511, 512, 513, 1000, 1999, 2000} {
		ids = append(ids, strings.Repeat("a", n))
	}
	ids = append(ids, strings.Repeat("é", 128), strings.Repeat("é", 129)) // 256 and 258 bytes
	for c := rune(0); c < 0x20; c++ {
		ids = append(ids, "id"+string(c)+"x")
	}
	ids = append(ids, "id\x7fx", "id\u0085x", "id\u009fx", "line\nbreak", "tab\there", "\r")
	ids = append(ids, "\xff", "a\xc3", "\xed\xa0\x80", "ok\xfe\xffok", "\xc0\xaf")
	ids = append(ids, "a:b:c", "a:b", ":", "x@y#z/w", "/", "@", "#", "..", "../etc/passwd", ".hidden",
		"gh-1/2", "X:coll:1", "X-coll-1", "123", "-1", "0", "1e3")
	ids = append(ids, "日本語", "rocket-🚀", "rtl-\u202e-x", "sep\u2028x", "zw\u200bj", "ﬁ")
	r := rand.New(rand.NewPCG(16, 2))
	for range 60 {
		b := make([]byte, r.IntN(400))
		for i := range b {
			b[i] = byte(r.IntN(256))
			if r.IntN(3) > 0 {
				b[i] = "az09:@#/.-_ ~"[r.IntN(13)]
			}
		}
		ids = append(ids, string(b))
	}
	return ids
}

// Every enqueue entrance either refuses an id with an error, writing
// nothing, or takes an id that keeps the job id rule.
func TestJobIDEntrances(t *testing.T) {
	ctx := context.Background()
	dbAdd, dbForge := livetest.Valkey(t), livetest.Valkey(t)
	q, err := queue.New(dbAdd.Client, fleet.SharedQueue, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProducer(dbForge.Client, ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	router := NewRouter(p, RouterConfig{})
	data, _ := json.Marshal(Job{Kind: KindForge, Repo: "acme/web", Flow: "fix", Task: "t"})
	for _, id := range hostileIDs() {
		valid := fleet.CheckJobID(id) == nil
		_, _, addErr := q.Add(ctx, JobName, data, queue.AddOptions{JobID: id})
		_, forgeErr := router.EnqueueForge(ctx, ForgeDelivery{JobID: id, Job: Job{Repo: "acme/web", Flow: "fix", Task: "t"}})
		for name, err := range map[string]error{"Add": addErr, "EnqueueForge": forgeErr} {
			if err == nil && !valid && id != "" { // "" asks for a numbered id
				t.Errorf("%s took %q, which breaks the job id rule", name, id)
			}
			if err != nil && valid && id != "" && queue.ValidateJobID(id) == nil {
				t.Errorf("%s refused %q: %v", name, id, err)
			}
		}
		if addErr != nil && id != "" {
			if n, _ := dbAdd.Client.Exists(ctx, "bull:pi-jobs:"+id).Result(); n != 0 {
				t.Errorf("Add refused %q but wrote its job", id)
			}
		}
	}
}

// peerAdd writes a job the way another BullMQ client may, with any id it
// allows, bypassing this module's checks.
func peerAdd(t *testing.T, c *redis.Client, id string, data []byte) {
	t.Helper()
	ctx := context.Background()
	key := "bull:pi-jobs:" + id
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	if err := c.HSet(ctx, key, "name", JobName, "data", string(data), "opts", `{"attempts":1}`,
		"timestamp", now, "delay", "0", "priority", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.LPush(ctx, "bull:pi-jobs:wait", id).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ZAdd(ctx, "bull:pi-jobs:marker", redis.Z{Member: "0"}).Err(); err != nil {
		t.Fatal(err)
	}
}

// A job a peer wrote with an id this module refuses is read, refused with
// exactly one record and failed, never run; the valid ones among them run
// and are recorded under their own names.
func TestPeerWrittenIDsAreRefusedAtPickup(t *testing.T) {
	f := newOrphanFixture(t)
	f.cap = 1000 // every valid one runs
	rt := &orphanRuntime{reap: container.ReapReport{Enumerated: true}}
	_, stop := f.boot(t, rt, &orphanRegistry{})
	data, _ := json.Marshal(Job{Kind: KindForge, Repo: "acme/web", Flow: "fix", Task: "t"})
	seen := map[string]bool{}
	var ids []string
	for _, id := range hostileIDs() {
		// "" is no custom id (BullMQ numbers it); "0:..." are BullMQ's markers.
		if id == "" || strings.HasPrefix(id, "0:") || seen[id] {
			continue
		}
		seen[id] = true
		ids = append(ids, id)
		peerAdd(t, f.db.Client, id, data)
	}
	ctx := context.Background()
	deadline := time.Now().Add(90 * time.Second)
	for _, id := range ids {
		for {
			j, err := f.shared.Get(ctx, id)
			if err == nil && (j.State == queue.StateFailed || j.State == queue.StateCompleted) {
				valid := fleet.CheckJobID(id) == nil
				if !valid && (j.State != queue.StateFailed || j.FailedReason != ReasonInvalidJob || j.AttemptsMade != 1) {
					t.Errorf("%q: %s (%s), want failed as invalid-job", id, j.State, j.FailedReason)
				}
				if valid && j.State != queue.StateCompleted {
					t.Errorf("%q: %s (%s), want completed", id, j.State, j.FailedReason)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%q not finished: %+v %v", id, j, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	stop()
	ran := map[string]int{}
	for _, id := range rt.ran() {
		ran[id]++
	}
	files := 0
	for _, id := range ids {
		recID, quoted := RefusedJobID(id)
		recs, err := ReadRecords(f.cfg.LogsDir, recID)
		if err != nil || len(recs) != 1 {
			t.Errorf("%q: %d records (%v), want exactly one", id, len(recs), err)
			continue
		}
		files++
		r := recs[0]
		if fleet.CheckJobID(id) == nil {
			if ran[id] != 1 || r.Outcome != OutcomeCompleted || r.JobID != id || r.JobIDQuoted != "" {
				t.Errorf("%q: ran %d times, record %+v", id, ran[id], r)
			}
			continue
		}
		if ran[id] != 0 || r.Outcome != OutcomeFailed || r.Reason != ReasonInvalidJob || r.ExitCode != nil || r.JobIDQuoted != quoted {
			t.Errorf("%q: ran %d times, record %+v", id, ran[id], r)
		}
	}
	if all := len(mustReadDir(t, f.cfg.LogsDir)); all != files {
		t.Errorf("%d record files for %d jobs", all, files)
	}
}

// FuzzJobIDNames holds the names a job id maps to: a safe, bounded stem that
// no other id shares, a record name that splits back into it and the
// attempt, and a refusal record that is valid whatever the id.
func FuzzJobIDNames(f *testing.F) {
	for _, id := range hostileIDs() {
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
		stem, n, ok := parseRecordName(RecordName(a, 7))
		if !ok || stem != sa || n != 7 {
			t.Fatalf("RecordName(%q, 7) splits into %q %d %v", a, stem, n, ok)
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

func mustReadDir(t *testing.T, dir string) []os.DirEntry {
	t.Helper()
	e, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
