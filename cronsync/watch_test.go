package cronsync

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

// runWatcher runs w until the test ends and checks that Run returned nil.
func runWatcher(t *testing.T, w *Watcher) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v on cancel, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return within 5s of cancel")
		}
	}
	t.Cleanup(stop)
	return stop
}

// An invalid edit keeps the installed schedulers and the published set; a
// missing file is an invalid edit too; a burst of writes is one reload; a
// rename over the file is seen.
func TestWatcherReloads(t *testing.T) {
	db := livetest.Valkey(t)
	folder := t.TempDir()
	v := func(ids ...string) []byte {
		var cs []cronTrigger
		for _, id := range ids {
			cs = append(cs, cronTrigger{id: id, pattern: "0 3 * * *", folder: folder})
		}
		return triggersFile(cs...)
	}
	path := tempFile(t, v("one"))
	own := ReadOwn(path)
	h := newHost(t, db, "a", "UTC", own, folder)
	if gr := h.gate(t); gr.Refused != "" {
		t.Fatalf("boot: %+v", gr)
	}
	fpOne, _ := h.live.FPCron()

	logs := &logtest.Buffer{}
	w, err := NewWatcher(path, WatchConfig{Poll: 20 * time.Millisecond, Debounce: 150 * time.Millisecond, Retry: -1,
		Logger: logs.Logger(), Host: "a", Live: h.live}, h.apply)
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)

	// Invalid: kept.
	writeFile(t, path, []byte(`{"triggers":[{"on":{"type":"cron","id":"two","pattern":"61 * * * *"}`))
	ev := logs.WaitEvents(t, "schedules_reload_invalid", 1)
	if ev[0]["kept"] != true || ev[0]["host"] != "a" {
		t.Fatalf("schedules_reload_invalid = %v", ev[0])
	}
	if got := h.ids(t); !slices.Equal(got, []string{"one"}) {
		t.Fatalf("an invalid edit changed the schedulers: %v", got)
	}
	if fp, _ := h.live.FPCron(); fp != fpOne {
		t.Fatal("an invalid edit changed the published fingerprint")
	}

	// Valid: installed.
	writeFile(t, path, v("one", "two"))
	ev = logs.WaitEvents(t, "schedules_reloaded", 1)
	if ev[0]["installed"] != float64(2) || ev[0]["removed"] != float64(0) {
		t.Fatalf("schedules_reloaded = %v", ev[0])
	}
	if got := h.ids(t); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("after a valid edit: %v", got)
	}
	if fp, _ := h.live.FPCron(); fp == fpOne {
		t.Fatal("the live set did not follow a valid edit")
	}

	// A burst of writes, closer together than the debounce: one reload of the
	// last content.
	for _, ids := range [][]string{{"three"}, {"three", "four"}, {"four"}} {
		writeFile(t, path, v(ids...))
		time.Sleep(10 * time.Millisecond)
	}
	ev = logs.WaitEvents(t, "schedules_reloaded", 2)
	if ev[1]["installed"] != float64(1) || ev[1]["removed"] != float64(2) {
		t.Fatalf("burst reload = %v", ev[1])
	}
	if got := h.ids(t); !slices.Equal(got, []string{"four"}) {
		t.Fatalf("after the burst: %v", got)
	}

	// An editor's rename over the file.
	tmp := filepath.Join(filepath.Dir(path), ".triggers.json.swp")
	writeFile(t, tmp, v("five"))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	logs.WaitEvents(t, "schedules_reloaded", 3)
	if got := h.ids(t); !slices.Equal(got, []string{"five"}) {
		t.Fatalf("after a rename: %v", got)
	}

	// Deleted: kept, said once.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	ev = logs.WaitEvents(t, "schedules_reload_invalid", 2)
	if ev[1]["reason"] != "missing" || ev[1]["kept"] != true {
		t.Fatalf("missing file event = %v", ev[1])
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(logs.Events(t, "schedules_reload_invalid")); n != 2 {
		t.Fatalf("a missing file was reported %d times", n-1)
	}
	if got := h.ids(t); !slices.Equal(got, []string{"five"}) {
		t.Fatalf("a missing file changed the schedulers: %v", got)
	}
	if n := len(logs.Events(t, "schedules_reloaded")); n != 3 {
		t.Fatalf("%d reloads, want 3 (one per settled edit)", n)
	}
}

// A refusal is never reported as a reload; the watcher retries, and succeeds
// once the peer has caught up.
func TestWatcherRefusalAndRetry(t *testing.T) {
	db := livetest.Valkey(t)
	folder := t.TempDir()
	v1 := triggersFile(cronTrigger{id: "one", pattern: "0 3 * * *", folder: folder})
	v2 := triggersFile(cronTrigger{id: "one", pattern: "0 3 * * *", folder: folder},
		cronTrigger{id: "two", pattern: "0 4 * * *", folder: folder})
	path := tempFile(t, v1)
	a := newHost(t, db, "a", "UTC", ReadOwn(path), folder)
	b := newHost(t, db, "b", "UTC", Own{Configured: true, Entries: mustParse(t, v1)}, folder)
	a.gate(t)
	b.gate(t)

	logs := &logtest.Buffer{}
	w, err := NewWatcher(path, WatchConfig{Poll: 20 * time.Millisecond, Debounce: 40 * time.Millisecond,
		Retry: 150 * time.Millisecond, Logger: logs.Logger(), Host: "a", Live: a.live}, a.apply)
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)

	writeFile(t, path, v2)
	ev := logs.WaitEvents(t, "schedules_reload_refused", 1)
	if ev[0]["refused"] != RefusedDivergence || ev[0]["host"] != "a" {
		t.Fatalf("schedules_reload_refused = %v", ev[0])
	}
	if n := len(logs.Events(t, "schedules_reloaded")); n != 0 {
		t.Fatalf("a refusal was logged as a reload (%d)", n)
	}
	if got := a.ids(t); !slices.Equal(got, []string{"one"}) {
		t.Fatalf("a refused reload changed the schedulers: %v", got)
	}
	logs.WaitEvents(t, "schedules_reload_refused", 2) // retried, still refused

	b.live.Update(mustParse(t, v2))
	if gr := b.gate(t); gr.Refused != "" {
		t.Fatalf("b after the sync: %+v", gr)
	}
	ev = logs.WaitEvents(t, "schedules_reloaded", 1)
	if ev[0]["installed"] != float64(2) {
		t.Fatalf("retry reload = %v", ev[0])
	}
	if got := a.ids(t); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("after the retry: %v", got)
	}
}

// An edit made between the boot read and Run is applied at the first poll.
func TestWatcherCatchesUpWithLiveSet(t *testing.T) {
	folder := t.TempDir()
	path := tempFile(t, triggersFile(cronTrigger{id: "one", pattern: "0 3 * * *", folder: folder}))
	live := NewLiveSet(ReadOwn(path), "UTC")
	writeFile(t, path, triggersFile(cronTrigger{id: "two", pattern: "0 3 * * *", folder: folder}))
	got := make(chan []Entry, 4)
	w, err := NewWatcher(path, WatchConfig{Poll: 10 * time.Millisecond, Debounce: time.Millisecond, Live: live},
		func(_ context.Context, set []Entry) (GateResult, error) {
			got <- set
			return GateResult{}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)
	select {
	case set := <-got:
		if len(set) != 1 || set[0].SchedulerID != "two" {
			t.Fatalf("applied %+v", set)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the edit made before Run was never applied")
	}
	if own := live.Own(); len(own.Entries) != 1 || own.Entries[0].SchedulerID != "two" {
		t.Fatalf("live set = %+v", own)
	}
}

func TestWatcherStopsOnCancel(t *testing.T) {
	path := tempFile(t, []byte(`{"triggers":[]}`))
	before := runtime.NumGoroutine()
	w, err := NewWatcher(path, WatchConfig{Poll: 5 * time.Millisecond},
		func(context.Context, []Entry) (GateResult, error) { return GateResult{}, nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	time.Sleep(30 * time.Millisecond)
	if err := w.Run(ctx); err == nil {
		t.Fatal("a second concurrent Run was allowed")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v on cancel, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Run returned, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}

	if _, err := NewWatcher("", WatchConfig{}, func(context.Context, []Entry) (GateResult, error) { return GateResult{}, nil }); err == nil {
		t.Fatal("NewWatcher accepted an empty path")
	}
	if _, err := NewWatcher(path, WatchConfig{}, nil); err == nil {
		t.Fatal("NewWatcher accepted a nil onChange")
	}
}
