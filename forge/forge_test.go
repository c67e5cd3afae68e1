package forge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/forge"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/jobs"
)

func TestParseGitHubEveryOctokitExample(t *testing.T) {
	for _, name := range []string{"issues", "issue_comment", "pull_request", "pull_request_review"} {
		for i, ex := range fixtures.GitHubAll(t, name) {
			ev, err := forge.ParseGitHub(name, "d-1", ex)
			require.NoError(t, err, "%s[%d]", name, i)
			assert.Contains(t, ev.Repo, "/", "%s[%d]", name, i)
			assert.Positive(t, ev.SenderID, "%s[%d]", name, i)
		}
	}
}

func TestParseGitHubKinds(t *testing.T) {
	ev, err := forge.ParseGitHub("issues", "d", fixtures.GitHub(t, "issues", "labeled", 0))
	require.NoError(t, err)
	assert.Equal(t, forge.KindLabel, ev.Kind)
	assert.Equal(t, []string{"bug"}, ev.Added)
	assert.Equal(t, 1, ev.Number)
	assert.Equal(t, "Codertocat", ev.SenderLogin)

	ev, err = forge.ParseGitHub("issue_comment", "d", fixtures.GitHub(t, "issue_comment", "created", 0))
	require.NoError(t, err)
	assert.Equal(t, forge.KindComment, ev.Kind)
	assert.Contains(t, ev.Comment, "totally right")
	assert.NotZero(t, ev.CommentID, "the job names the comment; the host reads its text")

	ev, err = forge.ParseGitHub("pull_request", "d", fixtures.GitHub(t, "pull_request", "closed", 0))
	require.NoError(t, err)
	assert.Equal(t, forge.KindPullRequest, ev.Kind)
	assert.True(t, ev.PullRequest)
	assert.Equal(t, 2, ev.Number)

	ev, err = forge.ParseGitHub("pull_request_review", "d", fixtures.GitHub(t, "pull_request_review", "submitted", 0))
	require.NoError(t, err)
	assert.Equal(t, "review_submitted", ev.Action)
	assert.Equal(t, "commented", ev.ReviewState)
	assert.NotZero(t, ev.ReviewID)

	ev, err = forge.ParseGitHub("issues", "d", fixtures.GitHub(t, "issues", "edited", 0))
	require.NoError(t, err)
	assert.Empty(t, ev.Kind, "an edit is not an event any trigger handles")

	ev, err = forge.ParseGitHub("push", "d", []byte(`{"ref":"refs/heads/main"}`))
	require.NoError(t, err)
	assert.Empty(t, ev.Kind)
}

func TestParseMalformed(t *testing.T) {
	for _, c := range []struct {
		name  string
		parse func(string, string, []byte) (forge.Event, error)
		event string
		body  string
	}{
		{"github not json", forge.ParseGitHub, "issues", `{"action":`},
		{"github wrong shape", forge.ParseGitHub, "issues", `{"action":"labeled","issue":"x"}`},
		{"github no sender", forge.ParseGitHub, "issues", `{"action":"labeled","issue":{"number":1},"repository":{"full_name":"a/b"}}`},
		{"gitlab not json", forge.ParseGitLab, "Issue Hook", `[`},
		{"forgejo no repo", forge.ParseForgejo, "issues", `{"action":"closed","issue":{"number":1}}`},
		{"forgejo no number", forge.ParseForgejo, "issues", `{"action":"closed","repository":{"full_name":"a/b"},"sender":{"id":3}}`},
	} {
		_, err := c.parse(c.event, "d", []byte(c.body))
		assert.ErrorIs(t, err, forge.ErrMalformed, c.name)
	}
}

func TestParseGitLabDocumentedPayloads(t *testing.T) {
	ev, err := forge.ParseGitLab("Issue Hook", "d", fixtures.File(t, "gitlab", "issue.json"))
	require.NoError(t, err)
	assert.Equal(t, "gitlabhq/gitlab-test", ev.Repo)
	assert.Equal(t, int64(1), ev.ProjectID)
	assert.Equal(t, 23, ev.Number)
	assert.Equal(t, forge.KindLabel, ev.Kind, "open: the whole label set is new")
	assert.Equal(t, []string{"API"}, ev.Added)

	// An update that adds a label: only the added one counts.
	body := fixtures.Edit(t, fixtures.File(t, "gitlab", "issue.json"), func(m map[string]any) {
		m["object_attributes"].(map[string]any)["action"] = "update"
	})
	ev, err = forge.ParseGitLab("Issue Hook", "d", body)
	require.NoError(t, err)
	assert.Equal(t, forge.KindLabel, ev.Kind)
	assert.Equal(t, []string{"Platform"}, ev.Added)

	ev, err = forge.ParseGitLab("Merge Request Hook", "d", fixtures.File(t, "gitlab", "merge_request.json"))
	require.NoError(t, err)
	assert.Equal(t, forge.KindPullRequest, ev.Kind)
	assert.Equal(t, "open", ev.Action)
	assert.True(t, ev.PullRequest)

	ev, err = forge.ParseGitLab("Note Hook", "d", fixtures.File(t, "gitlab", "note_issue.json"))
	require.NoError(t, err)
	assert.Equal(t, forge.KindComment, ev.Kind)
	assert.Equal(t, 17, ev.Number)
	assert.Equal(t, int64(42), ev.SenderID)
	assert.Equal(t, "Hello world", ev.Comment)

	ev, err = forge.ParseGitLab("Note Hook", "d", fixtures.File(t, "gitlab", "note_merge_request.json"))
	require.NoError(t, err)
	assert.True(t, ev.PullRequest)
	assert.Equal(t, 1, ev.Number)
}

// forgejoDelivery is a delivery recorded from a real Gitea: its body and the
// X-Gitea-Event header it came with.
func forgejoDelivery(t *testing.T, name string) (string, []byte) {
	t.Helper()
	var h map[string]string
	require.NoError(t, json.Unmarshal(fixtures.File(t, "forgejo", name+".headers.json"), &h))
	require.NotEmpty(t, h["X-Gitea-Event"], name)
	return h["X-Gitea-Event"], fixtures.File(t, "forgejo", name+".json")
}

func TestParseForgejoPayloads(t *testing.T) {
	event, body := forgejoDelivery(t, "issues_label_updated")
	assert.Equal(t, "issues", event, "Gitea sends a label change as an issues event")
	ev, err := forge.ParseForgejo(event, "d", body)
	require.NoError(t, err)
	assert.Equal(t, forge.KindLabel, ev.Kind)
	assert.Equal(t, "label_updated", ev.Action)
	assert.Equal(t, "acme/widgets", ev.Repo)
	assert.Equal(t, 1, ev.Number)
	assert.Equal(t, []string{"pi:fix"}, ev.Added)
	assert.Equal(t, "pi-admin", ev.SenderLogin)
	assert.Equal(t, int64(1), ev.SenderID)
	assert.False(t, ev.PullRequest)

	event, body = forgejoDelivery(t, "issue_comment_created")
	ev, err = forge.ParseForgejo(event, "d", body)
	require.NoError(t, err)
	assert.Equal(t, forge.KindComment, ev.Kind)
	assert.Equal(t, "/pi fix please", ev.Comment)
	assert.NotZero(t, ev.CommentID)
	assert.Equal(t, 1, ev.Number)
	assert.Equal(t, "pi-admin", ev.SenderLogin)
	assert.False(t, ev.PullRequest)

	event, body = forgejoDelivery(t, "pull_request_opened")
	ev, err = forge.ParseForgejo(event, "d", body)
	require.NoError(t, err)
	assert.Equal(t, forge.KindPullRequest, ev.Kind)
	assert.Equal(t, "opened", ev.Action)
	assert.True(t, ev.PullRequest)
	assert.Equal(t, 2, ev.Number)

	event, body = forgejoDelivery(t, "issues_closed")
	ev, err = forge.ParseForgejo(event, "d", body)
	require.NoError(t, err)
	assert.Equal(t, forge.KindClose, ev.Kind)
	assert.Equal(t, 1, ev.Number)
}

func triggers(t *testing.T, file string) []cronsync.ForgeTrigger {
	t.Helper()
	fts, err := cronsync.ParseForgeTriggers([]byte(file))
	require.NoError(t, err)
	return fts
}

const triggersFile = `{"triggers": [
 {"on": {"type": "label", "id": "fix-label", "repos": ["Codertocat/Hello-World"], "any": ["bug"], "none": ["wontfix"]},
  "run": {"kind": "github", "flow": "fix", "replicas": 2}},
 {"on": {"type": "comment", "repos": ["Codertocat/Hello-World"], "phrase": "fixed"},
  "run": {"kind": "github", "command": "answer", "instructions": "Be brief."}},
 {"on": {"type": "pull_request", "repos": ["Codertocat/Hello-World"], "actions": ["review_submitted"], "reviewState": "approved"},
  "run": {"kind": "github", "flow": "land"}},
 {"on": {"type": "pull_request", "repos": ["Codertocat/Hello-World"], "actions": ["opened", "synchronize"]},
  "run": {"kind": "github", "flow": "review"}},
 {"on": {"type": "issue", "id": "close-one", "repos": ["Codertocat/Hello-World"], "number": 1, "once": true},
  "run": {"kind": "github", "flow": "retro"}}
]}`

func TestMatch(t *testing.T) {
	fts := triggers(t, triggersFile)
	ev := forge.Event{Forge: jobs.ForgeGitHub, Repo: "Codertocat/Hello-World", Number: 1, SenderID: 5}

	label := ev
	label.Kind, label.Added, label.Labels = forge.KindLabel, []string{"bug"}, []string{"bug"}
	tr, need, reason := forge.Match(fts, label)
	assert.Empty(t, reason)
	assert.Equal(t, "fix-label", tr.Name)
	assert.Equal(t, forge.NeedTriage, need)

	label.Labels = []string{"bug", "wontfix"}
	_, _, reason = forge.Match(fts, label)
	assert.Equal(t, forge.ReasonNoLabel, reason)

	label.Added, label.Labels = []string{"docs"}, []string{"bug", "docs"}
	_, _, reason = forge.Match(fts, label)
	assert.Equal(t, forge.ReasonNoLabel, reason, "an unrelated label does not re-fire")

	other := label
	other.Repo = "someone/else"
	_, _, reason = forge.Match(fts, other)
	assert.Equal(t, forge.ReasonUnknownRepository, reason)
	other = label
	other.Forge = jobs.ForgeGitLab
	_, _, reason = forge.Match(fts, other)
	assert.Equal(t, forge.ReasonUnknownRepository, reason, "another forge's triggers do not serve it")

	c := ev
	c.Kind, c.Comment = forge.KindComment, "I have fixed nothing"
	tr, need, reason = forge.Match(fts, c)
	assert.Empty(t, reason)
	assert.Equal(t, "comment-1", tr.Name)
	assert.Equal(t, forge.NeedWrite, need)
	c.Comment = "nothing to see"
	_, _, reason = forge.Match(fts, c)
	assert.Equal(t, forge.ReasonNoPhrase, reason)

	pr := ev
	pr.Kind, pr.PullRequest, pr.Action, pr.ReviewState = forge.KindPullRequest, true, "review_submitted", "commented"
	_, _, reason = forge.Match(fts, pr)
	assert.Equal(t, forge.ReasonReviewState, reason)
	pr.ReviewState = "approved"
	tr, _, reason = forge.Match(fts, pr)
	assert.Empty(t, reason)
	assert.Equal(t, "pull-request-2", tr.Name)
	pr.Action, pr.Number = "closed", 5
	_, _, reason = forge.Match(fts, pr)
	assert.Equal(t, forge.ReasonNoPRTrigger, reason)

	cl := ev
	cl.Kind, cl.Action = forge.KindClose, "closed"
	tr, _, reason = forge.Match(fts, cl)
	assert.Empty(t, reason)
	assert.Equal(t, "close-one", tr.Name)
	cl.Number = 2
	_, _, reason = forge.Match(fts, cl)
	assert.Equal(t, forge.ReasonCloseNumber, reason)

	// A pull request closed (or merged) fires close triggers too.
	prClose := ev
	prClose.Kind, prClose.Action, prClose.PullRequest = forge.KindPullRequest, "closed", true
	tr, _, reason = forge.Match(fts, prClose)
	assert.Empty(t, reason)
	assert.Equal(t, "close-one", tr.Name)

	un := ev
	_, _, reason = forge.Match(fts, un)
	assert.Equal(t, forge.ReasonUnhandled, reason)
}

// fakeRouter records deliveries.
type fakeRouter struct {
	mu   sync.Mutex
	got  []enqueue.ForgeDelivery
	fail error
}

func (f *fakeRouter) EnqueueForge(_ context.Context, d enqueue.ForgeDelivery) (enqueue.Enqueued, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return enqueue.Enqueued{}, f.fail
	}
	if err := d.Job.Validate(); err != nil {
		return enqueue.Enqueued{}, err
	}
	f.got = append(f.got, d)
	return enqueue.Enqueued{JobID: d.JobID, Queue: "pi-jobs", Added: true}, nil
}

type fakePerms struct {
	allow bool
	err   error
	asked []forge.Need
}

func (p *fakePerms) Allowed(_ context.Context, _ forge.Event, need forge.Need) (bool, error) {
	p.asked = append(p.asked, need)
	return p.allow, p.err
}

func newIntake(t *testing.T, r forge.Enqueuer, p forge.Permissions, logs *bytes.Buffer) *forge.Intake {
	t.Helper()
	in, err := forge.NewIntake(forge.IntakeConfig{
		Enqueuer:    r,
		Permissions: map[jobs.Forge]forge.Permissions{jobs.ForgeGitHub: p},
		Logger:      slog.New(slog.NewJSONHandler(logs, nil)),
		Host:        "h1",
		Now:         func() time.Time { return time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC) },
	})
	require.NoError(t, err)
	in.SetTriggers(triggers(t, triggersFile))
	return in
}

func TestIntakeEnqueuesReplicasWithDeliveryIDs(t *testing.T) {
	r, p, logs := &fakeRouter{}, &fakePerms{allow: true}, &bytes.Buffer{}
	in := newIntake(t, r, p, logs)
	ev, err := forge.ParseGitHub("issues", "72d3162e-cc78-11e3-81ab-4c9367dc0958", fixtures.GitHub(t, "issues", "labeled", 0))
	require.NoError(t, err)
	out, err := in.Handle(context.Background(), ev)
	require.NoError(t, err)
	assert.Equal(t, forge.StatusEnqueued, out.Status)
	require.Len(t, r.got, 2)
	assert.Equal(t, "gh-72d3162e-cc78-11e3-81ab-4c9367dc0958-r1", r.got[0].JobID)
	assert.Equal(t, "gh-72d3162e-cc78-11e3-81ab-4c9367dc0958-r2", r.got[1].JobID)
	assert.Equal(t, "github:Codertocat/Hello-World#1:fix-label:r2", r.got[1].DedupID)
	j := r.got[1].Job
	assert.Equal(t, jobs.KindForge, j.Kind)
	assert.Equal(t, "Codertocat/Hello-World", j.Repo)
	assert.Equal(t, 1, j.Number)
	assert.Equal(t, "fix-label", j.Trigger)
	assert.Equal(t, "72d3162e-cc78-11e3-81ab-4c9367dc0958", j.DeliveryID)
	assert.Equal(t, 2, j.Replica)
	assert.Equal(t, 2, j.Replicas)
	assert.Equal(t, []forge.Need{forge.NeedTriage}, p.asked)
	assert.Contains(t, logs.String(), `"msg":"forge_enqueued"`)
	assert.Contains(t, logs.String(), `"host":"h1"`)
	assert.NotContains(t, logs.String(), "Codertocat\",\"", "no login in the log")
}

func TestIntakeRefusesWithoutPermission(t *testing.T) {
	r, p, logs := &fakeRouter{}, &fakePerms{allow: false}, &bytes.Buffer{}
	in := newIntake(t, r, p, logs)
	ev, err := forge.ParseGitHub("issue_comment", "d-2", fixtures.GitHub(t, "issue_comment", "created", 0))
	require.NoError(t, err)
	out, err := in.Handle(context.Background(), ev)
	require.NoError(t, err)
	assert.Equal(t, forge.StatusRefused, out.Status)
	assert.Equal(t, forge.ReasonAuthorNotAllowed, out.Reason)
	assert.Empty(t, r.got)
	assert.Contains(t, logs.String(), `"msg":"forge_refused"`)
	assert.Contains(t, logs.String(), `"reason":"author-not-allowed"`)
	assert.Contains(t, logs.String(), `"need":"write"`)
}

func TestIntakeLookupFailureIsAnError(t *testing.T) {
	r, p := &fakeRouter{}, &fakePerms{err: fmt.Errorf("%w: status 502", forge.ErrLookup)}
	in := newIntake(t, r, p, &bytes.Buffer{})
	ev, err := forge.ParseGitHub("issue_comment", "d-3", fixtures.GitHub(t, "issue_comment", "created", 0))
	require.NoError(t, err)
	_, err = in.Handle(context.Background(), ev)
	assert.ErrorIs(t, err, forge.ErrLookup)
	assert.Empty(t, r.got)

	p.err = fmt.Errorf("%w (status 403)", forge.ErrLookupForbidden)
	out, err := in.Handle(context.Background(), ev)
	require.NoError(t, err)
	assert.Equal(t, forge.ReasonLookupForbidden, out.Reason)
}

func TestIntakeSelfIsRefused(t *testing.T) {
	r := &fakeRouter{}
	in, err := forge.NewIntake(forge.IntakeConfig{
		Enqueuer:    r,
		Permissions: map[jobs.Forge]forge.Permissions{jobs.ForgeGitHub: &fakePerms{allow: true}},
		SelfIDs:     map[jobs.Forge]int64{jobs.ForgeGitHub: 21031067},
	})
	require.NoError(t, err)
	in.SetTriggers(triggers(t, triggersFile))
	ev, err := forge.ParseGitHub("issue_comment", "d-4", fixtures.GitHub(t, "issue_comment", "created", 0))
	require.NoError(t, err)
	out, err := in.Handle(context.Background(), ev)
	require.NoError(t, err)
	assert.Equal(t, forge.ReasonSelf, out.Reason)
	assert.Empty(t, r.got)
}

func TestIntakeOnceDisarmsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "triggers.json")
	require.NoError(t, os.WriteFile(path, []byte(triggersFile), 0o640))
	r, logs := &fakeRouter{}, &bytes.Buffer{}
	in := newIntake(t, r, &fakePerms{allow: true}, logs)
	in2, err := forge.NewIntake(forge.IntakeConfig{
		Enqueuer:    r,
		Permissions: map[jobs.Forge]forge.Permissions{jobs.ForgeGitHub: &fakePerms{allow: true}},
		Disarm:      forge.FileDisarmer(path),
		Logger:      slog.New(slog.NewJSONHandler(logs, nil)),
		Now:         func() time.Time { return time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC) },
	})
	require.NoError(t, err)
	_ = in
	in2.SetTriggers(triggers(t, triggersFile))
	ev := forge.Event{Forge: jobs.ForgeGitHub, DeliveryID: "d-5", Kind: forge.KindClose, Action: "closed",
		Repo: "Codertocat/Hello-World", Number: 1, SenderID: 9, SenderLogin: "x"}
	out, err := in2.Handle(context.Background(), ev)
	require.NoError(t, err)
	require.Equal(t, forge.StatusEnqueued, out.Status, logs.String())

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"disarmed": {`)
	assert.Contains(t, string(data), `"jobId": "gh-d-5"`)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), fi.Mode().Perm(), "the file keeps its mode")
	fts, err := cronsync.ParseForgeTriggers(data)
	require.NoError(t, err, "the written file is a valid triggers file")
	assert.True(t, fts[4].Disarmed)

	// Fires no more: neither in this process nor after a reload of the file.
	ev.DeliveryID = "d-6"
	out, err = in2.Handle(context.Background(), ev)
	require.NoError(t, err)
	assert.Equal(t, forge.ReasonDisarmed, out.Reason)
	in2.SetTriggers(fts)
	out, err = in2.Handle(context.Background(), ev)
	require.NoError(t, err)
	assert.Equal(t, forge.ReasonDisarmed, out.Reason)
	assert.Len(t, r.got, 1)
}

func TestIntakeEnqueueFailureIsAnError(t *testing.T) {
	r := &fakeRouter{fail: errors.New("valkey down")}
	in := newIntake(t, r, &fakePerms{allow: true}, &bytes.Buffer{})
	ev, err := forge.ParseGitHub("issue_comment", "d-7", fixtures.GitHub(t, "issue_comment", "created", 0))
	require.NoError(t, err)
	_, err = in.Handle(context.Background(), ev)
	assert.ErrorContains(t, err, "valkey down")
}

// apiDouble serves one forge permission endpoint.
func apiDouble(t *testing.T, path, wantAuth string, status int, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			http.Error(w, "unexpected path "+r.URL.Path, http.StatusTeapot)
			return
		}
		if !strings.Contains(r.Header.Get("Authorization")+r.Header.Get("Private-Token"), wantAuth) {
			http.Error(w, "bad auth", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestGitHubPermissions(t *testing.T) {
	ev := forge.Event{Repo: "acme/api", SenderLogin: "octo"}
	path := "/repos/acme/api/collaborators/octo/permission"
	for _, c := range []struct {
		status int
		body   string
		need   forge.Need
		want   bool
		err    error
	}{
		{200, `{"permission":"write","role_name":"write"}`, forge.NeedWrite, true, nil},
		{200, `{"permission":"admin","role_name":"admin"}`, forge.NeedWrite, true, nil},
		{200, `{"permission":"read","role_name":"triage"}`, forge.NeedTriage, true, nil},
		{200, `{"permission":"read","role_name":"triage"}`, forge.NeedWrite, false, nil},
		{200, `{"permission":"read","role_name":"read"}`, forge.NeedTriage, false, nil},
		{404, `{"message":"Not Found"}`, forge.NeedWrite, false, nil},
		{502, `{}`, forge.NeedWrite, false, forge.ErrLookup},
		{403, `{"message":"Resource not accessible"}`, forge.NeedWrite, false, forge.ErrLookupForbidden},
	} {
		srv := apiDouble(t, path, "Bearer tok", c.status, c.body)
		g := forge.GitHubPermissions{BaseURL: srv.URL, Tokens: forge.StaticToken("tok")}
		ok, err := g.Allowed(context.Background(), ev, c.need)
		if c.err != nil {
			assert.ErrorIs(t, err, c.err, c.body)
			continue
		}
		require.NoError(t, err, c.body)
		assert.Equal(t, c.want, ok, "%d %s need %s", c.status, c.body, c.need)
	}
}

func TestGitLabPermissions(t *testing.T) {
	ev := forge.Event{Repo: "grp/proj", ProjectID: 14, SenderID: 42}
	path := "/api/v4/projects/14/members/all/42"
	for _, c := range []struct {
		level int
		need  forge.Need
		want  bool
	}{{30, forge.NeedWrite, true}, {20, forge.NeedWrite, false}, {20, forge.NeedTriage, true}, {10, forge.NeedTriage, false}} {
		srv := apiDouble(t, path, "tok", 200, fmt.Sprintf(`{"id":42,"username":"u","access_level":%d}`, c.level))
		g := forge.GitLabPermissions{BaseURL: srv.URL, Tokens: forge.StaticToken("tok")}
		ok, err := g.Allowed(context.Background(), ev, c.need)
		require.NoError(t, err)
		assert.Equal(t, c.want, ok, "level %d need %s", c.level, c.need)
	}
	srv := apiDouble(t, path, "tok", 404, `{"message":"404 Not found"}`)
	ok, err := forge.GitLabPermissions{BaseURL: srv.URL, Tokens: forge.StaticToken("tok")}.Allowed(context.Background(), ev, forge.NeedWrite)
	require.NoError(t, err)
	assert.False(t, ok)
}

func TestForgejoPermissions(t *testing.T) {
	ev := forge.Event{Repo: "acme/widgets", SenderLogin: "alice"}
	path := "/api/v1/repos/acme/widgets/collaborators/alice/permission"
	for _, c := range []struct {
		perm string
		want bool
	}{{"write", true}, {"admin", true}, {"owner", true}, {"read", false}, {"none", false}} {
		srv := apiDouble(t, path, "token tok", 200, fmt.Sprintf(`{"permission":%q,"role_name":%q}`, c.perm, c.perm))
		ok, err := forge.ForgejoPermissions{BaseURL: srv.URL, Tokens: forge.StaticToken("tok")}.Allowed(context.Background(), ev, forge.NeedWrite)
		require.NoError(t, err)
		assert.Equal(t, c.want, ok, c.perm)
	}
}

func TestStaticTokenEmptyIsAnError(t *testing.T) {
	_, err := forge.StaticToken("").Token(context.Background(), "a/b")
	assert.Error(t, err)
}

func TestDeliveryJobIsValid(t *testing.T) {
	fts := triggers(t, triggersFile)
	d := forge.Delivery(fts[1], forge.Event{Forge: jobs.ForgeGitHub, DeliveryID: "abc", Repo: "Codertocat/Hello-World", Number: 3, PullRequest: true}, 1)
	require.NoError(t, d.Job.Validate())
	data, err := json.Marshal(d.Job)
	require.NoError(t, err)
	_, err = jobs.ParseJob(data)
	require.NoError(t, err)
	assert.Equal(t, "gh-abc", d.JobID)
	assert.Equal(t, "Be brief.", d.Job.Instructions)
	assert.Equal(t, "answer", d.Job.Command)

	// What the host needs to read the event from the forge: ids and the
	// label, never a text of the delivery.
	d = forge.Delivery(fts[1], forge.Event{Forge: jobs.ForgeGitHub, DeliveryID: "abd", Repo: "Codertocat/Hello-World", Number: 3,
		SenderID: 21, CommentID: 99, ReviewID: 7, Added: []string{"bug\nx"}, Comment: "secret text"}, 1)
	require.NoError(t, d.Job.Validate())
	assert.Equal(t, int64(99), d.Job.CommentID)
	assert.Equal(t, int64(7), d.Job.ReviewID)
	assert.Equal(t, int64(21), d.Job.ActorID)
	assert.Equal(t, "bug x", d.Job.Label)
	data, err = json.Marshal(d.Job)
	require.NoError(t, err)
	assert.NotContains(t, string(data), "secret text")
}

func TestSelfIDs(t *testing.T) {
	ctx := context.Background()
	gh := apiDouble(t, "/user", "Bearer tok", 200, `{"id":4242,"login":"pi-bot"}`)
	id, err := forge.GitHubSelfID(ctx, gh.URL, "tok", nil)
	require.NoError(t, err)
	assert.Equal(t, int64(4242), id)
	gl := apiDouble(t, "/api/v4/user", "tok", 200, `{"id":77,"username":"project_5_bot"}`)
	id, err = forge.GitLabSelfID(ctx, gl.URL, "tok", nil)
	require.NoError(t, err)
	assert.Equal(t, int64(77), id)
	fj := apiDouble(t, "/api/v1/user", "token tok", 200, `{"id":9,"login":"pi"}`)
	id, err = forge.ForgejoSelfID(ctx, fj.URL, "tok", nil)
	require.NoError(t, err)
	assert.Equal(t, int64(9), id)
	bad := apiDouble(t, "/user", "Bearer other", 200, `{}`)
	_, err = forge.GitHubSelfID(ctx, bad.URL, "tok", nil)
	assert.ErrorIs(t, err, forge.ErrSelfUnknown)
}

func TestCachedPermissions(t *testing.T) {
	inner := &fakePerms{allow: true}
	now := time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)
	c := &forge.CachedPermissions{Inner: inner, TTL: 30 * time.Second, Now: func() time.Time { return now }}
	ev := forge.Event{Forge: jobs.ForgeGitHub, Repo: "a/b", SenderID: 1, SenderLogin: "x"}
	for range 3 {
		ok, err := c.Allowed(context.Background(), ev, forge.NeedWrite)
		require.NoError(t, err)
		assert.True(t, ok)
	}
	assert.Len(t, inner.asked, 1, "one lookup within the TTL")
	_, _ = c.Allowed(context.Background(), ev, forge.NeedTriage)
	assert.Len(t, inner.asked, 2, "another need is another question")
	now = now.Add(31 * time.Second)
	_, _ = c.Allowed(context.Background(), ev, forge.NeedWrite)
	assert.Len(t, inner.asked, 3, "expired")
	inner.err = errors.New("boom")
	now = now.Add(31 * time.Second)
	_, err := c.Allowed(context.Background(), ev, forge.NeedWrite)
	assert.Error(t, err)
	inner.err = nil
	_, err = c.Allowed(context.Background(), ev, forge.NeedWrite)
	require.NoError(t, err)
	assert.Len(t, inner.asked, 5, "a failure is not cached")
}

func TestIntakeOnceStaysDisarmedWhenTheFileCannotBeWritten(t *testing.T) {
	r, logs := &fakeRouter{}, &bytes.Buffer{}
	in, err := forge.NewIntake(forge.IntakeConfig{
		Enqueuer:    r,
		Permissions: map[jobs.Forge]forge.Permissions{jobs.ForgeGitHub: &fakePerms{allow: true}},
		Disarm:      forge.FileDisarmer(filepath.Join(t.TempDir(), "gone", "triggers.json")),
		Logger:      slog.New(slog.NewJSONHandler(logs, nil)),
	})
	require.NoError(t, err)
	in.SetTriggers(triggers(t, triggersFile))
	ev := forge.Event{Forge: jobs.ForgeGitHub, DeliveryID: "d-8", Kind: forge.KindClose, Action: "closed",
		Repo: "Codertocat/Hello-World", Number: 1, SenderID: 9, SenderLogin: "x"}
	out, err := in.Handle(context.Background(), ev)
	require.NoError(t, err)
	assert.Equal(t, forge.StatusEnqueued, out.Status)
	assert.Contains(t, logs.String(), `"msg":"forge_disarm_failed"`)
	ev.DeliveryID = "d-9"
	out, err = in.Handle(context.Background(), ev)
	require.NoError(t, err)
	assert.Equal(t, forge.ReasonDisarmed, out.Reason)
	assert.Len(t, r.got, 1)
}

// On GitLab each job's project token is a bot user of its own, which no
// SelfIDs entry can name: a merge request or a note by any project or group
// token bot starts no job (the host's own merge requests cannot loop).
func TestIntakeGitLabTokenBotIsSelf(t *testing.T) {
	r := &fakeRouter{}
	in, err := forge.NewIntake(forge.IntakeConfig{
		Enqueuer:    r,
		Permissions: map[jobs.Forge]forge.Permissions{jobs.ForgeGitLab: &fakePerms{allow: true}},
	})
	require.NoError(t, err)
	in.SetTriggers(triggers(t, `{"triggers": [
 {"on": {"type": "pull_request", "repos": ["gitlabhq/gitlab-test"], "actions": ["open"]}, "run": {"kind": "gitlab", "flow": "review"}}]}`))
	for _, login := range []string{"project_278964_bot_3f8a5cf1c2e24b0e8ba7d0a45a0d2b11", "project_7_bot", "group_12_bot_ab12"} {
		ev := forge.Event{Forge: jobs.ForgeGitLab, Kind: forge.KindPullRequest, Action: "open", Repo: "gitlabhq/gitlab-test",
			Number: 3, PullRequest: true, SenderID: 99, SenderLogin: login, DeliveryID: "d-" + login}
		out, err := in.Handle(context.Background(), ev)
		require.NoError(t, err)
		assert.Equal(t, forge.ReasonSelf, out.Reason, login)
	}
	assert.Empty(t, r.got)
	// A person whose name only looks alike is not a bot.
	ev := forge.Event{Forge: jobs.ForgeGitLab, Kind: forge.KindPullRequest, Action: "open", Repo: "gitlabhq/gitlab-test",
		Number: 3, PullRequest: true, SenderID: 98, SenderLogin: "project_bot_fan", DeliveryID: "d-person"}
	out, err := in.Handle(context.Background(), ev)
	require.NoError(t, err)
	assert.NotEqual(t, forge.ReasonSelf, out.Reason)
}

// A handled event type whose payload lacks the issue or pull request it is
// about is malformed, never a panic.
func TestParseGitHubWithoutItsSubjectIsMalformed(t *testing.T) {
	for _, event := range []string{"issues", "issue_comment", "pull_request", "pull_request_review"} {
		_, err := forge.ParseGitHub(event, "d", []byte(`{"action":"opened"}`))
		require.Error(t, err, event)
	}
}
