package cronsync

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// The concrete stack satisfies the interfaces cronsync consumes.
var (
	_ SchedulerStore = (*queue.Queue)(nil)
	_ Peers          = (*registry.Registry)(nil)
)

// cronTrigger is one cron trigger of a test file.
type cronTrigger struct {
	id, pattern, tz, folder string
}

// triggersFile renders a triggers file: the cron triggers plus one webhook
// trigger that cron must ignore.
func triggersFile(crons ...cronTrigger) []byte {
	var items []string
	for _, c := range crons {
		on := map[string]any{"type": "cron", "id": c.id, "pattern": c.pattern}
		if c.tz != "" {
			on["tz"] = c.tz
		}
		run := map[string]any{"kind": "local", "folder": c.folder, "flow": "fix", "task": "tidy " + c.id}
		b, _ := json.Marshal(map[string]any{"on": on, "run": run})
		items = append(items, string(b))
	}
	items = append(items, `{"on":{"type":"label","any":["pi"]},"run":{"kind":"github","flow":"fix"}}`)
	return []byte(`{"triggers":[` + strings.Join(items, ",") + `]}`)
}

// mustParse parses a file that must be valid.
func mustParse(t testing.TB, data []byte) []Entry {
	t.Helper()
	tr, err := ParseTriggers(data)
	if err != nil {
		t.Fatalf("ParseTriggers: %v\n%s", err, data)
	}
	return tr.Cron
}

// writeFile replaces path's content in place.
func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// testHost is one worker of a test fleet: its own queue, its registry row fed
// by its live set, and the folders its machine has.
type testHost struct {
	name    string
	tz      string
	q       *queue.Queue
	reg     *registry.Registry
	live    *LiveSet
	folders map[string]bool
	logs    *logtest.Buffer
}

func newHost(t *testing.T, db *livetest.ValkeyDB, name, tz string, own Own, folders ...string) *testHost {
	t.Helper()
	h := &testHost{name: name, tz: tz, folders: map[string]bool{}, logs: &logtest.Buffer{}}
	for _, f := range folders {
		h.folders[f] = true
	}
	var err error
	h.q, err = queue.New(db.Client, fleet.HostQueueName(name), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h.live = NewLiveSet(own, tz)
	h.reg, err = registry.New(db.Client, name, registry.Facts{
		TZ:        registry.Value(tz),
		FPCron:    h.live.FPCron,
		CronCount: h.live.CronCount,
		Routes:    registry.Value(true),
	}, registry.Config{TTL: 10 * time.Second, Interval: time.Second, Machine: "machine-" + name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.reg.Close(ctx)
	})
	return h
}

func (h *testHost) has(folder string) bool { return h.folders[folder] }

func (h *testHost) opts() Options {
	return Options{Host: h.name, TZ: h.tz, Logger: h.logs.Logger()}
}

// apply is the worker's reload path: place, then gate.
func (h *testHost) apply(ctx context.Context, authored []Entry) (GateResult, error) {
	served, _ := Served(authored, true, h.has)
	return ReconcileGated(ctx, h.q, h.reg, Own{Configured: true, Entries: authored}, served, h.opts())
}

// gate reconciles the live set.
func (h *testHost) gate(t testing.TB) GateResult {
	t.Helper()
	own := h.live.Own()
	served, _ := Served(own.Entries, true, h.has)
	gr, err := ReconcileGated(context.Background(), h.q, h.reg, own, served, h.opts())
	if err != nil {
		t.Fatalf("%s: ReconcileGated returned an error: %v", h.name, err)
	}
	return gr
}

// ids lists the schedulers on the host's own queue.
func (h *testHost) ids(t testing.TB) []string {
	t.Helper()
	return schedulerIDs(t, h.q)
}

func schedulerIDs(t testing.TB, q *queue.Queue) []string {
	t.Helper()
	list, err := q.Schedulers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(list))
	for _, s := range list {
		ids = append(ids, s.ID)
	}
	slices.Sort(ids)
	return ids
}

func tempFile(t testing.TB, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "triggers.json")
	writeFile(t, path, data)
	return path
}
