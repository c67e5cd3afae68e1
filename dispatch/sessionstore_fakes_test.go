package dispatch_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

// storeHosts are two Workers of one fleet on two hosts (two logs folders)
// sharing one session store, each with its own queue.
type storeHosts struct {
	a, b   *fakeHost
	store  *dispatchtest.Sessions
	seen   *seen
	blog   *logtest.Buffer
	folder string
}

func newStoreHosts(t *testing.T, key fleet.Key) *storeHosts {
	t.Helper()
	s := &storeHosts{store: dispatchtest.NewSessions(), blog: &logtest.Buffer{}, folder: t.TempDir(),
		seen: &seen{prompt: map[string]string{}, job: map[string]string{}, session: map[string]string{}}}
	s.a, s.b = newFakeHost(t), newFakeHost(t)
	s.b.cfg.WorkerName = "host-b"
	s.b.queue.WorkerName = "host-b"
	s.b.tune.Logger = s.blog.Logger()
	for _, h := range []*fakeHost{s.a, s.b} {
		h.cfg.FleetKey = key
		h.deps.Sessions = s.store
		h.rt.RunFunc = s.seen.runFunc(func(spec container.Spec) {
			if spec.SessionDir != "" && spec.JobID == "first" {
				_ = os.WriteFile(filepath.Join(spec.SessionDir, "s1.jsonl"), []byte(`{"role":"user","text":"fix it"}`+"\n"), 0o600)
			}
		})
		h.start(t)
	}
	return s
}

func testFleetKey(t *testing.T, fill byte) fleet.Key {
	t.Helper()
	k, err := fleet.NewKey(bytes.Repeat([]byte{fill}, fleet.MinKeyLen))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// sessionsIn lists the sessions a host keeps in its logs folder.
func sessionsIn(t *testing.T, h *fakeHost) []string {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(h.cfg.LogsDir, "sessions"))
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// A folder job on host A keeps its session there and in the fleet's store;
// a resume job of the same thread on host B, which kept none, continues it.
func TestResumeOnAnotherHostRestoresTheStoredSession(t *testing.T) {
	s := newStoreHosts(t, testFleetKey(t, 'k'))
	s.a.add(t, "first", `{"kind":"local","folder":"`+s.folder+`","flow":"plan","task":"Plan it"}`, 1)
	s.a.wait(t, "first", finished)
	if len(sessionsIn(t, s.a)) != 1 || len(sessionsIn(t, s.b)) != 0 {
		t.Fatalf("sessions kept: host A %q, host B %q", sessionsIn(t, s.a), sessionsIn(t, s.b))
	}
	s.b.add(t, "second", `{"kind":"local","folder":"`+s.folder+`","flow":"fix","task":"Go on","resume":true}`, 1)
	s.b.wait(t, "second", finished)
	s.seen.mu.Lock()
	got := s.seen.session["second"]
	s.seen.mu.Unlock()
	if got != `s1.jsonl={"role":"user","text":"fix it"}`+"\n" {
		t.Fatalf("the resume job on host B started with %q, want host A's session; host B said:\n%s", got, s.blog.String())
	}
	if ev := s.blog.Events(t, "session_restored"); len(ev) != 1 || ev[0]["from"] != "store" {
		t.Fatalf("session_restored events %v", ev)
	}
}

// forgedSession is a stored value as anyone who can write Valkey may make
// it: files under names, for thread, signed with key when it is set.
func forgedSession(t *testing.T, thread string, key fleet.Key, files ...[2]string) []byte {
	t.Helper()
	return forgedSessionAt(t, thread, key, time.Now(), files...)
}

// forgedSessionAt is forgedSession kept at at.
func forgedSessionAt(t *testing.T, thread string, key fleet.Key, at time.Time, files ...[2]string) []byte {
	t.Helper()
	type file struct {
		Name string `json:"name"`
		Data []byte `json:"data"`
	}
	v := struct {
		Thread string `json:"thread"`
		KeptAt int64  `json:"keptAt"`
		Files  []file `json:"files"`
	}{Thread: thread, KeptAt: at.UnixMilli()}
	for _, f := range files {
		v.Files = append(v.Files, file{Name: f[0], Data: []byte(f[1])})
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if err := json.NewEncoder(zw).Encode(v); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	sig := "-"
	if key.IsSet() {
		sum := sha256.Sum256(gz.Bytes())
		var err error
		if sig, err = key.SignEntry("session:"+thread, map[string]string{"sha256": hex.EncodeToString(sum[:])}); err != nil {
			t.Fatal(err)
		}
	}
	return append([]byte("pisession1 "+sig+"\n"), gz.Bytes()...)
}

// A value in the store that this host did not sign, that is over the
// bound, or whose files are not plain names or too many, is refused with a
// log line, and the resume job starts afresh: nothing of it reaches the
// job's session folder or anywhere else on the host.
func TestForgedStoredSessionIsRefused(t *testing.T) {
	key := testFleetKey(t, 'k')
	many := make([][2]string, 65)
	for i := range many {
		many[i] = [2]string{"f" + strings.Repeat("x", i), "x"}
	}
	cases := []struct {
		name  string
		value func(thread string) []byte
		why   string
	}{
		{"Unsigned", func(th string) []byte { return forgedSession(t, th, fleet.Key{}, [2]string{"s.jsonl", "forged"}) }, "unsigned"},
		{"OtherKey", func(th string) []byte {
			return forgedSession(t, th, testFleetKey(t, 'z'), [2]string{"s.jsonl", "forged"})
		}, "does not verify"},
		{"OtherThread", func(th string) []byte {
			return forgedSession(t, "local:/elsewhere", key, [2]string{"s.jsonl", "forged"})
		}, "does not verify"},
		{"Oversized", func(string) []byte { return make([]byte, dispatch.MaxSessionBytes+1) }, "over"},
		{"PathName", func(th string) []byte { return forgedSession(t, th, key, [2]string{"../escaped.jsonl", "forged"}) }, "path separator"},
		{"DotDot", func(th string) []byte { return forgedSession(t, th, key, [2]string{"..", "forged"}) }, `".."`},
		{"TooManyFiles", func(th string) []byte { return forgedSession(t, th, key, many...) }, "more than 64 files"},
		{"Garbage", func(string) []byte { return []byte("pisession1 -\nnot gzip") }, "unsigned"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStoreHosts(t, key)
			thread := "local:" + s.folder
			s.store.Write(thread, c.value(thread), time.Hour)
			s.b.add(t, "second", `{"kind":"local","folder":"`+s.folder+`","flow":"fix","task":"Go on","resume":true}`, 1)
			s.b.wait(t, "second", finished)
			s.seen.mu.Lock()
			got := s.seen.session["second"]
			s.seen.mu.Unlock()
			if got != "" {
				t.Fatalf("the resume job started with %q from a forged value", got)
			}
			ev := s.blog.Events(t, "session_store_refused")
			if len(ev) != 1 || !strings.Contains(ev[0]["reason"].(string), c.why) {
				t.Fatalf("session_store_refused events %v, want one saying %q; host B said:\n%s", ev, c.why, s.blog.String())
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(s.folder), "escaped.jsonl")); err == nil {
				t.Fatal("a forged name wrote outside the session folder")
			}
		})
	}
}

// A host's own kept session wins over an older copy in the store.
func TestOwnNewerSessionWinsOverTheStore(t *testing.T) {
	key := testFleetKey(t, 'k')
	s := newStoreHosts(t, key)
	thread := "local:" + s.folder
	s.a.add(t, "first", `{"kind":"local","folder":"`+s.folder+`","flow":"plan","task":"Plan it"}`, 1)
	s.a.wait(t, "first", finished)
	// The store's copy is replaced by an older one (kept an hour ago).
	s.store.Write(thread, forgedSessionAt(t, thread, key, time.Now().Add(-time.Hour), [2]string{"old.jsonl", "older"}), time.Hour)
	s.a.add(t, "second", `{"kind":"local","folder":"`+s.folder+`","flow":"fix","task":"Go on","resume":true}`, 1)
	s.a.wait(t, "second", finished)
	s.seen.mu.Lock()
	got := s.seen.session["second"]
	s.seen.mu.Unlock()
	if !strings.HasPrefix(got, "s1.jsonl=") {
		t.Fatalf("host A's own newer session was not used: %q", got)
	}
}
