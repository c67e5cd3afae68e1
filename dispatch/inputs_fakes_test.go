package dispatch_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/jobs"
)

// seen is what the fake container found in its mounts.
type seen struct {
	mu      sync.Mutex
	prompt  map[string]string // job id -> /job/prompt.md
	job     map[string]string // job id -> /job/job.json
	session map[string]string // job id -> /session's files, joined
}

func (s *seen) runFunc(write func(spec container.Spec)) func(context.Context, container.Spec) (container.Result, error) {
	return func(_ context.Context, spec container.Spec) (container.Result, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		p, _ := os.ReadFile(filepath.Join(spec.JobDir, dispatch.PromptFile))
		s.prompt[spec.JobID] = string(p)
		j, _ := os.ReadFile(filepath.Join(spec.JobDir, "job.json"))
		s.job[spec.JobID] = string(j)
		var files []string
		if spec.SessionDir != "" {
			entries, _ := os.ReadDir(spec.SessionDir)
			for _, e := range entries {
				b, _ := os.ReadFile(filepath.Join(spec.SessionDir, e.Name()))
				files = append(files, e.Name()+"="+string(b))
			}
		}
		s.session[spec.JobID] = strings.Join(files, ";")
		if write != nil {
			write(spec)
		}
		return container.Result{ExitCode: 0}, nil
	}
}

// A flow job is given its rendered prompt (the record keeps its digest) and
// its flow's excluded tools in job.json; its agent's session is kept for the
// folder's next job, its secrets redacted, and a resume job is given it.
func TestFlowJobPromptAndThreadSession(t *testing.T) {
	h := newFakeHost(t)
	folder := t.TempDir()
	s := &seen{prompt: map[string]string{}, job: map[string]string{}, session: map[string]string{}}
	h.rt.RunFunc = s.runFunc(func(spec container.Spec) {
		if spec.SessionDir != "" && spec.JobID == "first" {
			_ = os.WriteFile(filepath.Join(spec.SessionDir, "s1.jsonl"), []byte(`{"role":"user","text":"fix it"}`+"\n"), 0o600)
		}
	})
	h.start(t)

	h.add(t, "first", `{"kind":"local","folder":"`+folder+`","flow":"plan","task":"Plan the parser change"}`, 1)
	h.wait(t, "first", finished)
	rec := h.oneRecord(t, "first", jobs.OutcomeCompleted, jobs.ReasonCompleted)
	s.mu.Lock()
	prompt, jobJSON := s.prompt["first"], s.job["first"]
	s.mu.Unlock()
	if !strings.Contains(prompt, "## The flow: plan") || !strings.Contains(prompt, "Plan the parser change") {
		t.Fatalf("prompt.md:\n%s", prompt)
	}
	sum := sha256.Sum256([]byte(prompt))
	if rec.PromptDigest != hex.EncodeToString(sum[:8]) {
		t.Fatalf("record's prompt digest %q, want the prompt's", rec.PromptDigest)
	}
	var desc struct {
		ExcludeTools []string `json:"excludeTools"`
	}
	if err := json.Unmarshal([]byte(jobJSON), &desc); err != nil || !strings.Contains(strings.Join(desc.ExcludeTools, ","), "write") {
		t.Fatalf("job.json excludes %v (%v): the plan flow's tools are off", desc.ExcludeTools, err)
	}

	h.add(t, "second", `{"kind":"local","folder":"`+folder+`","flow":"fix","task":"Go on","resume":true}`, 1)
	h.wait(t, "second", finished)
	h.add(t, "third", `{"kind":"local","folder":"`+folder+`","flow":"fix","task":"Start over"}`, 1)
	h.wait(t, "third", finished)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.session["first"] != "" || !strings.Contains(s.session["second"], `s1.jsonl={"role":"user","text":"fix it"}`) {
		t.Fatalf("sessions seen: first %q, second %q: a resume continues the folder's kept session", s.session["first"], s.session["second"])
	}
	if s.session["third"] != "" {
		t.Fatalf("a job that does not resume started with %q", s.session["third"])
	}
}

// A job whose flow the host does not know is refused before anything runs.
func TestUnknownFlowIsRefusedAtPickup(t *testing.T) {
	h := newFakeHost(t)
	h.start(t)
	h.add(t, "nope", `{"kind":"local","folder":"`+t.TempDir()+`","flow":"no-such-flow","task":"t"}`, 1)
	h.wait(t, "nope", finished)
	h.oneRecord(t, "nope", jobs.OutcomePolicy, jobs.ReasonInvalidJob)
	if n := len(h.rt.Specs()); n != 0 {
		t.Fatalf("%d containers ran", n)
	}
}
