package stack_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	gitlab "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/inbox"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/internal/testkit/secrettest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/stack"
)

// On GitLab too the receiver writes a job's status note when it accepts the
// job: a real receiver takes a note delivery, and before any worker runs
// the issue shows exactly one note, saying queued, by GITLAB_TOKEN's user.
// A real worker, wired from the same variables, runs the job in Docker with
// its own project token: still exactly one note, edited to the outcome, and
// the record links it. A second job, refused before it ran (an image the
// host does not allow), edits its own queued note to the refusal. A note by
// GITLAB_TOKEN's user starts no job.
func TestReceiverQueuedStatusNoteGitLab(t *testing.T) {
	db := livetest.Valkey(t)
	dc := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, jobimage.Ensure(ctx, dc, jobimage.TestTag))

	const repo, done, refused = "gitlab-org/gitlab-test", 17, 18
	dir := t.TempDir()
	git := forgetest.StartGitServer(t, nil)
	git.CreateRepo(t, repo, "main", map[string]string{"README.md": "hello\n"})
	gl := forgetest.StartGitLab(t, git)
	gl.AddProject(repo, "main")
	gl.SetProjectID(repo, 5) // the example delivery's project
	gl.SetMember(repo, forgetest.ParentUser, gitlab.MaintainerPermissions)
	gl.SetMember(repo, "user1", gitlab.DeveloperPermissions)
	triggers := filepath.Join(dir, "triggers.json")
	require.NoError(t, os.WriteFile(triggers, []byte(`{"triggers": [
	  {"on": {"type": "comment", "id": "c", "repos": ["`+repo+`"], "phrase": "Hello"},
	   "run": {"kind": "gitlab", "flow": "fix", "task": "JOB_WRITE_FILE=README.md"}},
	  {"on": {"type": "issue", "id": "r", "repos": ["`+repo+`"]},
	   "run": {"kind": "gitlab", "flow": "fix", "task": "JOB_WRITE_FILE=README.md", "image": "pidispatch-not-allowed:1"}}]}`), 0o600))

	// The receiver, alone: no worker yet.
	port := freePort(t)
	env := map[string]string{
		"PI_ENV_FILE": "/dev/null", "VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_TRIGGERS_FILE": triggers,
		"GITLAB_URL": gl.URL, "GITLAB_TOKEN": gl.Parent, "GITLAB_WEBHOOK_MODE": "token", "GITLAB_WEBHOOK_SECRET": "gl-secret",
		"RECEIVER_BIND": "127.0.0.1", "RECEIVER_PORT": strconv.Itoa(port), "RECEIVER_SPOOL_DIR": filepath.Join(dir, "spool"),
	}
	var logBuf logtest.Buffer // what the receiver and the worker log
	getenv := func(k string) string { return env[k] }
	rcfg, err := config.Load(getenv)
	require.NoError(t, err)
	fc, err := config.LoadForge(getenv)
	require.NoError(t, err)
	in, err := stack.BuildIntake(context.Background(), rcfg, fc, logBuf.Logger())
	require.NoError(t, err)
	inCtx, stopIntake := context.WithCancel(context.Background())
	inDone := make(chan error, 1)
	go func() { inDone <- in.Run(inCtx) }()
	t.Cleanup(func() {
		stopIntake()
		<-inDone
		in.Close()
	})
	q, err := queue.New(db.Client, "pi-jobs", queue.Config{})
	require.NoError(t, err)
	// post posts an example delivery by user on issue iid: a note saying
	// "Hello world" (Note Hook), or the issue closed (Issue Hook); it
	// answers the id a job of it has.
	post := func(iid int, hook, user string) string {
		t.Helper()
		gl.AddIssue(repo, iid, "user1", "issue "+strconv.Itoa(iid), "It is broken.")
		project := func(m map[string]any) {
			m["user"].(map[string]any)["id"] = gl.UserID(user)
			m["user"].(map[string]any)["username"] = user
			p := m["project"].(map[string]any)
			p["id"], p["path_with_namespace"], p["git_http_url"], p["web_url"] = 5, repo, gl.CloneURL(repo), gl.URL+"/"+repo
		}
		var body []byte
		if hook == "Note Hook" {
			noteID := gl.AddNote(repo, "issue/"+strconv.Itoa(iid), user, "Hello world", false)
			body = fixtures.Edit(t, fixtures.File(t, "gitlab", "note_issue.json"), func(m map[string]any) {
				project(m)
				m["object_attributes"].(map[string]any)["id"] = noteID
				m["issue"].(map[string]any)["iid"] = iid
			})
		} else {
			body = fixtures.Edit(t, fixtures.File(t, "gitlab", "issue.json"), func(m map[string]any) {
				project(m)
				oa := m["object_attributes"].(map[string]any)
				oa["iid"], oa["action"], oa["state"] = iid, "close", "closed"
			})
		}
		req, err := http.NewRequest(http.MethodPost, "http://"+in.Addr().String()+"/gitlab", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Gitlab-Event", hook)
		req.Header.Set("X-Gitlab-Token", "gl-secret")
		req.Header.Set("X-Gitlab-Event-UUID", "d-gl-"+strconv.Itoa(iid))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
		return "gl-" + inbox.Delivery{Forge: jobs.ForgeGitLab, Body: body}.Key()
	}
	// deliver posts user1's delivery and waits for its job to be queued.
	deliver := func(iid int, hook string) string {
		t.Helper()
		jobID := post(iid, hook, "user1")
		require.Eventually(t, func() bool { _, err := q.Get(context.Background(), jobID); return err == nil }, 30*time.Second, 20*time.Millisecond)
		return jobID
	}
	// GITLAB_TOKEN's own user, which now writes every status note, starts
	// no job, even with the trigger's phrase.
	selfID := post(19, "Note Hook", forgetest.ParentUser)
	require.Eventually(t, func() bool { return logBuf.Count(t, "forge_refused") > 0 }, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, "self", logBuf.Events(t, "forge_refused")[0]["reason"])
	_, err = q.Get(context.Background(), selfID)
	require.Error(t, err, "no job for the host's own note")
	require.Empty(t, gl.Notes(repo, "issue/19"))

	jobID := deliver(done, "Note Hook")
	notes := gl.Notes(repo, "issue/17")
	require.Len(t, notes, 1, "before any worker: one status note")
	require.Contains(t, notes[0], "queued, waiting for a worker.")
	require.Contains(t, notes[0], "<!-- pidispatch:status job="+jobID+" -->")
	require.Equal(t, []string{forgetest.ParentUser}, gl.NoteAuthors(repo, "issue/17"), "written by GITLAB_TOKEN's user")
	require.Empty(t, gl.Mints(), "the receiver mints no project token")
	refusedID := deliver(refused, "Issue Hook")
	require.Len(t, gl.Notes(repo, "issue/18"), 1)

	// A worker wired from the same GitLab variables takes the jobs.
	logs, name := t.TempDir(), "forge-worker-gl"
	wenv := map[string]string{
		"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": name, "PI_JOB_IMAGE": jobimage.TestTag,
		"PI_LOGS_DIR": logs, "PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "0.5", "PI_CONTAINER_USER": "65534:65534",
		"GITLAB_URL": gl.URL, "GITLAB_TOKEN": gl.Parent,
	}
	wgetenv := func(k string) string { return wenv[k] }
	cfg, err := config.Load(wgetenv)
	require.NoError(t, err)
	creds, err := config.LoadForgeCredentials(wgetenv)
	require.NoError(t, err)
	forges, err := stack.ForgesFromCredentials(creds)
	require.NoError(t, err)
	log := logBuf.Logger()
	m, err := workspace.New(workspace.Config{Forges: forges, StateDir: t.TempDir(), Host: name, Logger: log, Backoff: 10 * time.Millisecond})
	require.NoError(t, err)
	spy := &secrettest.Spy{}
	s, err := stack.Build(context.Background(), cfg, log, dispatch.Tuning{JobsDir: t.TempDir()}, stack.WithForgeWorkspaces(m), spy.Option)
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.Worker.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-stopped:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Error("the worker did not stop")
		}
		s.Close()
	})
	record := func(id string) jobs.Record {
		t.Helper()
		require.Eventually(t, func() bool {
			recs, err := jobs.ReadRecords(logs, id)
			return err == nil && len(recs) == 1
		}, 90*time.Second, 200*time.Millisecond, "no record of %s", id)
		recs, err := jobs.ReadRecords(logs, id)
		require.NoError(t, err)
		return recs[0]
	}
	rec := record(jobID)
	require.Equal(t, jobs.OutcomeCompleted, rec.Outcome, rec.Reason)
	require.Eventually(t, func() bool {
		n := gl.Notes(repo, "issue/17")
		return len(n) == 1 && strings.Contains(n[0], "done. Pull request: ")
	}, 30*time.Second, 50*time.Millisecond, "notes: %q", gl.Notes(repo, "issue/17"))
	require.Regexp(t, `/gitlab-org/gitlab-test/-/issues/17#note_\d+$`, rec.StatusCommentURL)
	require.Equal(t, []string{forgetest.ParentUser}, gl.NoteAuthors(repo, "issue/17"), "after the worker: still the one note")
	require.Len(t, gl.MergeRequests(repo), 1)
	require.NotEmpty(t, gl.Mints(), "the job's clone and push had a project token")

	rec = record(refusedID)
	require.Equal(t, jobs.OutcomePolicy, rec.Outcome)
	require.Equal(t, jobs.ReasonImageNotAllowed, rec.Reason)
	notes = gl.Notes(repo, "issue/18")
	require.Len(t, notes, 1, "the refusal edits the queued note")
	require.Contains(t, notes[0], "refused (`image-not-allowed`)")
	require.Regexp(t, `/-/issues/18#note_\d+$`, rec.StatusCommentURL)

	require.Positive(t, gl.NoteEdits(), "edited in place")
	require.Zero(t, gl.NoteEditsRefused(), "no edit GitLab refused")
	require.Eventually(t, func() bool {
		return len(gl.Tokens()) == len(gl.Revoked())
	}, 30*time.Second, 50*time.Millisecond, "every project token is revoked")
	// GITLAB_TOKEN wrote the notes from the host only: it is in no
	// container, mounted file, record, Valkey key or log line.
	secrettest.Absent(t, append(secrettest.Texts(t, spy, logs, db.Client), logBuf.String()), append(gl.Tokens(), gl.Parent))
}
