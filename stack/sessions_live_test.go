package stack_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/stack"
)

// sessionRuntime stands in for Docker: it notes the files of each job's
// /session, by job id, and writes the first job's session there.
type sessionRuntime struct {
	scriptedRuntime
	mu   sync.Mutex
	seen map[string]string
}

func (r *sessionRuntime) Run(ctx context.Context, spec container.Spec) (container.Result, error) {
	var files []string
	if spec.SessionDir != "" {
		entries, _ := os.ReadDir(spec.SessionDir)
		for _, e := range entries {
			b, _ := os.ReadFile(filepath.Join(spec.SessionDir, e.Name()))
			files = append(files, e.Name()+"="+string(b))
		}
	}
	r.mu.Lock()
	first := len(r.seen) == 0
	r.seen[spec.JobID] = strings.Join(files, ";")
	r.mu.Unlock()
	if first && spec.SessionDir != "" {
		_ = os.WriteFile(filepath.Join(spec.SessionDir, "s1.jsonl"), []byte(`{"said":"hello"}`), 0o600)
	}
	return r.scriptedRuntime.Run(ctx, spec)
}

// sessionHost is one worker of the test's fleet, on its own logs folder.
type sessionHost struct {
	cfg  config.Config
	logs *logtest.Buffer
	p    *enqueue.Producer
}

func bootSessionHost(t *testing.T, db *livetest.ValkeyDB, name, keyFile string, rt *sessionRuntime) *sessionHost {
	t.Helper()
	env := map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": name, "PI_LOGS_DIR": t.TempDir(),
		"PI_JOB_IMAGE": "never-pulled:1", "PI_FOLDER_ROOTS": os.TempDir(), "PI_CONTAINER_USER": "owner",
		"PI_SESSION_STORE": "valkey", "PI_FLEET_KEY_FILE": keyFile}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	h := &sessionHost{cfg: cfg, logs: &logtest.Buffer{}}
	s, err := stack.Build(context.Background(), cfg, h.logs.Logger(), dispatch.Tuning{JobsDir: t.TempDir()},
		func(d *dispatch.Deps) { d.Runtime = rt })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Worker.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		s.Close()
	})
	if h.p, err = enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{"*"}, WorkerName: name, WorkerNameDeclared: true}); err != nil {
		t.Fatal(err)
	}
	return h
}

// run enqueues job on the host's own queue and waits for its record.
func (h *sessionHost) run(t *testing.T, job jobs.Job) string {
	t.Helper()
	e, err := h.p.EnqueueLocal(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if recs, _ := jobs.ReadRecords(h.cfg.LogsDir, e.JobID); len(recs) == 1 {
			return e.JobID
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record of %s; the host said:\n%s", e.JobID, h.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// With PI_SESSION_STORE=valkey, two hosts on two logs folders share one
// Valkey: host A's job keeps the thread's session in Valkey, signed; a
// resume job on host B, which kept none, continues it. An unsigned value
// written over it is refused with a log line, and host A's resume uses its
// own copy, never the forged one.
func TestLiveSessionStoreAcrossHosts(t *testing.T) {
	db := livetest.Valkey(t)
	keyFile := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("s3ss", 10)), 0o600); err != nil {
		t.Fatal(err)
	}
	rt := &sessionRuntime{seen: map[string]string{}}
	a := bootSessionHost(t, db, "sess-a", keyFile, rt)
	b := bootSessionHost(t, db, "sess-b", keyFile, rt)
	folder := t.TempDir()
	thread := "local:" + folder

	a.run(t, jobs.Job{Folder: folder, Flow: "fix", Task: "first"})
	stored, err := db.Client.Get(context.Background(), fleetstate.SessionKey(thread)).Bytes()
	if err != nil || !strings.HasPrefix(string(stored), "pisession1 ") || strings.HasPrefix(string(stored), "pisession1 -\n") {
		t.Fatalf("the session in Valkey: %.40q, %v; want a signed value", stored, err)
	}
	if ttl := db.Client.PTTL(context.Background(), fleetstate.SessionKey(thread)).Val(); ttl <= 29*24*time.Hour || ttl > 30*24*time.Hour {
		t.Fatalf("the stored session expires in %s, want PI_LOG_RETENTION_DAYS (30 days)", ttl)
	}
	second := b.run(t, jobs.Job{Folder: folder, Flow: "fix", Task: "second", Resume: true})
	rt.mu.Lock()
	got := rt.seen[second]
	rt.mu.Unlock()
	if got != `s1.jsonl={"said":"hello"}` {
		t.Fatalf("the resume job on host B started with %q; host B said:\n%s", got, b.logs.String())
	}

	forged := "pisession1 -\nnot what any host stored"
	if err := db.Client.Set(context.Background(), fleetstate.SessionKey(thread), forged, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	third := a.run(t, jobs.Job{Folder: folder, Flow: "fix", Task: "third", Resume: true})
	rt.mu.Lock()
	got = rt.seen[third]
	rt.mu.Unlock()
	if got != `s1.jsonl={"said":"hello"}` {
		t.Fatalf("the resume job on host A started with %q, want its own kept session", got)
	}
	if ev := a.logs.Events(t, "session_store_refused"); len(ev) != 1 || !strings.Contains(ev[0]["reason"].(string), "unsigned") {
		t.Fatalf("session_store_refused events %v", ev)
	}
}
