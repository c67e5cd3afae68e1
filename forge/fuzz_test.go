package forge_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/forge"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// Each forge's parser reads a verified body with the event and delivery
// headers beside it. Under fuzzing, seeded with the forges' published (or,
// for Gitea, recorded) payloads: nothing panics, a refusal is ErrMalformed,
// and an event a trigger may handle makes a job that passes the job's own
// validation and a job id the queue takes.

// parsed checks one parser's answer.
func parsed(t *testing.T, f jobs.Forge, ev forge.Event, err error) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, forge.ErrMalformed) {
			t.Fatalf("a refusal that is not ErrMalformed: %v", err)
		}
		return
	}
	if ev.Forge != f {
		t.Fatalf("forge %q, want %q", ev.Forge, f)
	}
	if ev.Kind == "" {
		return
	}
	if err := ev.Validate(); err != nil {
		t.Fatalf("accepted an event its own Validate refuses: %v", err)
	}
	fts, err := cronsync.ParseForgeTriggers([]byte(triggersFile))
	if err != nil {
		t.Fatal(err)
	}
	trig := fts[0]
	trig.Forge, trig.Repos = ev.Forge, []string{ev.Repo}
	for i := 1; i <= max(trig.Replicas, 1); i++ {
		d := forge.Delivery(trig, ev, i)
		if err := queue.ValidateJobID(d.JobID); err != nil {
			t.Fatalf("job id %q: %v", d.JobID, err)
		}
		data, err := json.Marshal(d.Job)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := jobs.ParseJob(data); err != nil {
			t.Fatalf("the event's job is invalid: %v", err)
		}
	}
}

func FuzzParseGitHub(f *testing.F) {
	for _, name := range []string{"issues", "issue_comment", "pull_request", "pull_request_review", "ping", "push"} {
		for _, ex := range fixtures.GitHubAll(f, name) {
			f.Add(name, "72d3162e-cc78-11e3-81ab-4c9367dc0958", []byte(ex))
		}
	}
	f.Fuzz(func(t *testing.T, event, delivery string, body []byte) {
		ev, err := forge.ParseGitHub(event, delivery, body)
		parsed(t, jobs.ForgeGitHub, ev, err)
	})
}

func FuzzParseGitLab(f *testing.F) {
	for name, event := range map[string]string{
		"issue.json": "Issue Hook", "merge_request.json": "Merge Request Hook",
		"note_issue.json": "Note Hook", "note_merge_request.json": "Note Hook",
	} {
		f.Add(event, "msg_2b6f4a1e-5c1d-4e6a-9f1e-1a2b3c4d5e6f", fixtures.File(f, "gitlab", name))
	}
	f.Fuzz(func(t *testing.T, event, delivery string, body []byte) {
		ev, err := forge.ParseGitLab(event, delivery, body)
		parsed(t, jobs.ForgeGitLab, ev, err)
	})
}

func FuzzParseForgejo(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(fixtures.Dir(), "forgejo", "*.headers.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no recorded Gitea deliveries in forge/testdata/forgejo: %v", err)
	}
	for _, h := range files {
		data, err := os.ReadFile(h)
		if err != nil {
			f.Fatal(err)
		}
		var headers map[string]string
		if err := json.Unmarshal(data, &headers); err != nil {
			f.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(h), ".headers.json")
		body := fixtures.File(f, "forgejo", name+".json")
		f.Add(headers["X-Gitea-Event"], headers["X-Gitea-Delivery"], body)
		f.Add(headers["X-Gitea-Event-Type"], headers["X-Gitea-Delivery"], body)
	}
	f.Fuzz(func(t *testing.T, event, delivery string, body []byte) {
		ev, err := forge.ParseForgejo(event, delivery, body)
		parsed(t, jobs.ForgeForgejo, ev, err)
	})
}
