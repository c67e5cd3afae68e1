package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/internal/image/agentimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
)

// demo --agent runs the real pi agent: its record is a completed run with
// the fake provider's usage, on no network, and the agent's file is shown.
func TestDemo_Agent(t *testing.T) {
	livetest.Docker(t)
	r := runCLI(t, nil, "demo", "--agent")
	if r.code != exitOK {
		t.Fatalf("demo --agent exited %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	m := demoRecordRE.FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no run record in stdout:\n%s", r.stdout)
	}
	var rec jobs.Record
	if err := json.Unmarshal([]byte(m[1]), &rec); err != nil {
		t.Fatal(err)
	}
	var tel struct {
		Turns  int
		Tokens struct{ Total int64 }
		Model  string
	}
	_ = json.Unmarshal(rec.Telemetry, &tel)
	if rec.Spend == nil || rec.Spend.Calls != 2 || rec.Spend.Tokens.Total() != 4452 || rec.Spend.Basis != jobs.BasisMetered {
		t.Fatalf("record spend %+v: the gateway should have metered both calls", rec.Spend)
	}
	// The fake provider's two answers: 1640 + 2812 tokens.
	if rec.Outcome != jobs.OutcomeCompleted || rec.Network != "none" || tel.Turns != 2 || tel.Tokens.Total != 4452 || tel.Model != demoAgentModel {
		t.Fatalf("record %+v telemetry %s", rec, rec.Telemetry)
	}
	for _, want := range []string{"agent image " + agentimage.Tag, "the job wrote hello.txt in the workspace:\n  hello from pi", "pi ran 2 turns on anthropic/" + demoAgentModel,
		"the worker's gateway metered 2 calls, 4452 tokens"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
}
