package dispatch_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
)

// A hostile job names its model with a bidi control and its provider as a
// Slack broadcast: neither is stored as it came (not in the record, not in
// the queue's result), and the worker logs which field it refused and why.
func TestExitLineMarkupRefusedAndLogged(t *testing.T) {
	h := newFakeHost(t)
	var logs logtest.Buffer
	h.tune.Logger = logs.Logger()
	h.cfg.UnsignedQueues = []string{fleet.SharedQueue} // the fake producer signs nothing
	raw := json.RawMessage(`{"event":"exit","outcome":"completed","turns":3,"provider":"<!channel>","model":"claude\u202egnp.exe"}`)
	h.rt.Script("hostile-exit", container.Result{ExitCode: 0, Telemetry: &container.Telemetry{Raw: raw}}, nil)
	h.start(t)
	h.add(t, "hostile-exit", forgeJob, 1)
	s := h.wait(t, "hostile-exit", finished)
	want := `{"event":"exit","outcome":"completed","turns":3}`
	if string(s.Result) != want {
		t.Fatalf("queue result %s, want %s", s.Result, want)
	}
	rec := h.oneRecord(t, "hostile-exit", jobs.OutcomeCompleted, jobs.ReasonCompleted)
	if string(rec.Telemetry) != want {
		t.Fatalf("record telemetry %s, want %s", rec.Telemetry, want)
	}
	evs := logs.WaitEvents(t, "job_exit_field_refused", 2)
	fields := map[string]string{}
	for _, ev := range evs {
		f, _ := ev["field"].(string)
		why, _ := ev["why"].(string)
		fields[f] = why
	}
	if !strings.Contains(fields["model"], "U+202E") || !strings.Contains(fields["provider"], "U+003C") {
		t.Fatalf("refusals %v: each names the character at fault", fields)
	}
}
