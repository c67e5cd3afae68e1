package cronsync_test

import (
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/jobs"
)

// A cron trigger's run object is the data of every job its scheduler fires, so
// the triggers file and the worker must agree on every field: a run the worker
// would refuse as invalid-job is refused when the file is read, naming the
// trigger and the field, and a run the file accepts is one the worker runs.
func TestTriggersAgreeWithTheWorker(t *testing.T) {
	models17 := `["m"` + strings.Repeat(`,"m"`, 16) + `]`
	tests := []struct {
		name, fields string // fields: run fields after kind and folder
		field        string // the refused field, "" when both accept
	}{
		{"turns at the bound", `"flow":"f","task":"t","maxTurns":10000`, ""},
		{"turns past the bound", `"flow":"f","task":"t","maxTurns":10001`, "maxTurns"},
		{"turns far past the bound", `"flow":"f","task":"t","maxTurns":100000`, "maxTurns"},
		{"uppercase image", `"flow":"f","task":"t","image":"Pi-Job:latest"`, "image"},
		{"image without a name", `"flow":"f","task":"t","image":":latest"`, "image"},
		{"empty task with a flow", `"flow":"f","task":""`, "task"},
		{"unknown tool", `"flow":"f","task":"t","excludeTools":["rm"]`, "excludeTools[0]"},
		{"tool twice", `"flow":"f","task":"t","excludeTools":["bash","bash"]`, "excludeTools[1]"},
		{"every tool", `"flow":"f","task":"t","excludeTools":["read","bash","powershell","edit","write","grep","find","ls"]`, ""},
		{"non-ASCII model", `"flow":"f","task":"t","model":"modèle-1"`, ""},
		{"model with a space", `"flow":"f","task":"t","model":"a b"`, "model"},
		{"too many models", `"flow":"f","task":"t","models":` + models17, "models"},
		{"zero cost", `"flow":"f","task":"t","maxCostUsd":"0.00"`, "maxCostUsd"},
		{"cost", `"flow":"f","task":"t","maxCostUsd":"2.5"`, ""},
		{"command without a task", `"command":"c"`, ""},
		{"neither flow nor command", `"task":"t"`, "flow"},
		{"flow with a colon", `"flow":"a:b","task":"t"`, "flow"},
		{"relative skills folder", `"flow":"f","task":"t","skillsDir":"skills"`, "skillsDir"},
		{"secrets profile with a comma", `"flow":"f","task":"t","secretsProfile":"a,b"`, "secretsProfile"},
		{"provider with a space", `"flow":"f","task":"t","provider":"a b"`, "provider"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run := `{"kind":"local","folder":"/srv/app",` + tc.fields + `}`
			_, fileErr := cronsync.ParseTriggers([]byte(`{"triggers":[{"on":{"type":"cron","id":"nightly","pattern":"0 3 * * *"},"run":` + run + `}]}`))
			_, jobErr := jobs.ParseJob([]byte(`{"kind":"cron","schedulerId":"nightly","folder":"/srv/app",` + tc.fields + `}`))
			if tc.field == "" {
				if fileErr != nil || jobErr != nil {
					t.Fatalf("want both to accept; triggers file: %v; worker: %v", fileErr, jobErr)
				}
				return
			}
			if jobErr == nil {
				t.Fatalf("the worker accepts the run; the case is wrong")
			}
			if fileErr == nil {
				t.Fatalf("the triggers file accepts a run the worker refuses (%v)", jobErr)
			}
			if want := `triggers[0] (id "nightly"): run.` + tc.field + `: `; !strings.Contains(fileErr.Error(), want) {
				t.Fatalf("error %q does not name %q", fileErr, want)
			}
		})
	}
}
