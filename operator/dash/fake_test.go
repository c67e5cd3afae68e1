package dash

import (
	"context"
	"sync"

	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/registry"
)

// fake is a Source and Actions in memory. failing fails the sections it
// names with their error; calls records the actions, in order.
type fake struct {
	mu       sync.Mutex
	hosts    []registry.Host
	status   operator.StatusReport
	held     []Held
	running  []Running
	runs     []jobs.Record
	degraded string
	starts   Starts
	failing  map[string]error
	calls    []string // actions, "cancel <id>" for cancels
}

func (f *fake) fail(sec string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failing[sec]
}

func (f *fake) Hosts(context.Context) ([]registry.Host, error) { return f.hosts, f.fail(secHosts) }
func (f *fake) Queues(context.Context) (operator.StatusReport, error) {
	return f.status, f.fail(secQueues)
}
func (f *fake) Held(context.Context, int) ([]Held, error)       { return f.held, f.fail(secHeld) }
func (f *fake) Running(context.Context, int) ([]Running, error) { return f.running, f.fail(secRunning) }
func (f *fake) Runs(context.Context, int) ([]jobs.Record, string, error) {
	return f.runs, f.degraded, f.fail(secRuns)
}
func (f *fake) Starts(context.Context) (Starts, error) { return f.starts, f.fail(secStarts) }

func (f *fake) record(call string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	return call + " done", nil
}

func (f *fake) Pause(context.Context) (string, error)  { return f.record("pause") }
func (f *fake) Resume(context.Context) (string, error) { return f.record("resume") }
func (f *fake) Cancel(_ context.Context, id string) (string, error) {
	return f.record("cancel " + id)
}

func (f *fake) actions() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

type fakeDollars []DollarWindow

func (d fakeDollars) DollarWindows(context.Context) ([]DollarWindow, error) { return d, nil }
