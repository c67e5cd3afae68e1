package poller

import (
	"encoding/json"
	"testing"

	"github.com/google/go-github/v84/github"

	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/forge"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// The poller reads GitHub's REST answers (issue events, comments, open pull
// requests, reviews) and makes intake events of them. Each fuzz target
// decodes an answer as go-github does and turns every item into its event:
// nothing panics, and every event the poller would hand over makes a job
// that passes the job's own validation, so a hostile or broken answer can
// never become a job that fails at enqueue, and is retried every cycle.

const fuzzRepo = "acme/api"

const fuzzTriggers = `{"triggers": [
 {"on": {"type": "comment", "repos": ["acme/api"], "phrase": "fix"}, "run": {"kind": "github", "flow": "fix", "replicas": 2}}
]}`

// handedOver checks an event the poller would hand to the intake.
func handedOver(t *testing.T, ev forge.Event) {
	t.Helper()
	if err := ev.Validate(); err != nil {
		t.Fatalf("handed over an invalid event: %v", err)
	}
	fts, err := cronsync.ParseForgeTriggers([]byte(fuzzTriggers))
	if err != nil {
		t.Fatal(err)
	}
	d := forge.Delivery(fts[0], ev, 1)
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

// seeds adds the objects GitHub's published webhook examples embed, which
// have the REST answers' shape, each as a one-item list.
func seeds(f *testing.F, event, field string) {
	for _, ex := range fixtures.GitHubAll(f, event) {
		var m map[string]json.RawMessage
		if json.Unmarshal(ex, &m) != nil || m[field] == nil {
			continue
		}
		f.Add([]byte("[" + string(m[field]) + "]"))
	}
}

func FuzzPollIssueEvents(f *testing.F) {
	for _, ex := range fixtures.GitHubAll(f, "issues") {
		var m map[string]json.RawMessage
		if json.Unmarshal(ex, &m) != nil {
			continue
		}
		var action string
		_ = json.Unmarshal(m["action"], &action)
		item, _ := json.Marshal(map[string]any{"id": 1, "event": action, "actor": m["sender"], "issue": m["issue"], "label": m["label"]})
		f.Add([]byte("[" + string(item) + "]"))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var list []*github.IssueEvent
		if json.Unmarshal(body, &list) != nil {
			return
		}
		for _, e := range list {
			if ev, ok := eventOf(fuzzRepo, e); ok {
				handedOver(t, ev)
			}
		}
	})
}

func FuzzPollComments(f *testing.F) {
	seeds(f, "issue_comment", "comment")
	f.Fuzz(func(t *testing.T, body []byte) {
		var list []*github.IssueComment
		if json.Unmarshal(body, &list) != nil {
			return
		}
		for _, cm := range list {
			if ev, ok := commentEvent(fuzzRepo, cm); ok {
				handedOver(t, ev)
			}
		}
	})
}

func FuzzPollPulls(f *testing.F) {
	seeds(f, "pull_request", "pull_request")
	f.Fuzz(func(t *testing.T, body []byte) {
		var list []*github.PullRequest
		if json.Unmarshal(body, &list) != nil {
			return
		}
		for _, pr := range list {
			for _, action := range []string{"opened", "synchronize"} {
				if ev, ok := pullEvent(fuzzRepo, pr, action); ok {
					handedOver(t, ev)
				}
			}
		}
	})
}

func FuzzPollReviews(f *testing.F) {
	seeds(f, "pull_request_review", "review")
	f.Fuzz(func(t *testing.T, body []byte) {
		var list []*github.PullRequestReview
		if json.Unmarshal(body, &list) != nil {
			return
		}
		for _, r := range list {
			if ev, ok := reviewEvent(fuzzRepo, 7, []string{"bug"}, r); ok {
				handedOver(t, ev)
			}
		}
	})
}
