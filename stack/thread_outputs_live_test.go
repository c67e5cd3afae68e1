//go:build unix

package stack_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/stack"
)

// forgeFleet is one or more real workers (stack.Build) sharing one Valkey
// database, one git server and one GitHub double, each with a workspace
// manager of its own; all of them drain the shared queue.
type forgeFleet struct {
	git    *forgetest.GitServer
	gh     *forgetest.GitHub
	base   string
	router *enqueue.Router
	hosts  []*fleetHost
	// suffix ends every delivery id: containers are named after job ids,
	// and another test process on the same Docker daemon (this package's
	// tests run by another checkout or session) must not share one.
	suffix string
	// log holds every host's log lines (JSON).
	log *lockedBuffer
}

// fleetHost is one worker of a forgeFleet.
type fleetHost struct {
	name string
	logs string // PI_LOGS_DIR: its run records
	jobs string // Tuning.JobsDir: its jobs' folders
}

// lockedBuffer is an io.Writer several workers' loggers share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) dump() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines are the log lines whose msg is msg, decoded.
func (b *lockedBuffer) lines(msg string) []map[string]any {
	b.mu.Lock()
	data := bytes.Clone(b.buf.Bytes())
	b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == msg {
			out = append(out, line)
		}
	}
	return out
}

// startForgeFleet starts one worker per name, each tuned by tune (its own
// JobsDir) with the extra environment env.
func startForgeFleet(t *testing.T, tune dispatch.Tuning, env map[string]string, names ...string) *forgeFleet {
	t.Helper()
	db := livetest.Valkey(t)
	dc := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, jobimage.Ensure(ctx, dc, jobimage.TestTag))

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	f := &forgeFleet{log: &lockedBuffer{}, suffix: "-" + strings.ToLower(rand.Text()[:8])}
	f.git = forgetest.StartGitServer(t, nil)
	f.base = f.git.CreateRepo(t, forgeRepo, "main", map[string]string{"README.md": "hello\n"})
	f.gh = forgetest.StartGitHub(t, f.git, 42, &key.PublicKey, time.Hour)
	f.gh.AddRepo(forgeRepo, "main")
	log := slog.New(slog.NewJSONHandler(f.log, nil))
	t.Cleanup(func() {
		// Runs after the workers stopped (cleanups run last registered first).
		if t.Failed() {
			t.Logf("the workers' log:\n%s", f.log.dump())
		}
	})

	for _, name := range names {
		h := &fleetHost{name: name, logs: t.TempDir(), jobs: t.TempDir()}
		vars := map[string]string{
			"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": name, "PI_JOB_IMAGE": jobimage.TestTag,
			"PI_LOGS_DIR": h.logs, "PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "0.5", "PI_CONTAINER_USER": "65534:65534",
		}
		for k, v := range env {
			vars[k] = v
		}
		cfg, err := config.Load(func(k string) string { return vars[k] })
		require.NoError(t, err)
		m, err := workspace.New(workspace.Config{
			Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeGitHub: {
				Minter: &token.GitHubApp{AppID: 42, InstallationID: 7, Key: key, APIURL: f.gh.URL},
				API:    &workspace.GitHub{APIURL: f.gh.URL},
			}},
			StateDir: t.TempDir(), Host: name, Logger: log, Backoff: 10 * time.Millisecond,
		})
		require.NoError(t, err)
		tn := tune
		tn.JobsDir = h.jobs
		s, err := stack.Build(context.Background(), cfg, log, tn, stack.WithForgeWorkspaces(m))
		require.NoError(t, err)
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Worker.Run(runCtx) }()
		t.Cleanup(func() {
			stop()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(60 * time.Second):
				t.Errorf("worker %s did not stop", name)
			}
			s.Close()
		})
		f.hosts = append(f.hosts, h)
	}
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, Attempts: 1})
	require.NoError(t, err)
	f.router = enqueue.NewRouter(p, enqueue.RouterConfig{})
	return f
}

// enqueue enqueues a forge delivery of flow fix for issue number and
// answers its job id (the delivery id, made unique to this run).
func (f *forgeFleet) enqueue(t *testing.T, delivery string, number int, task string) string {
	t.Helper()
	delivery += f.suffix
	e, err := f.router.EnqueueForge(context.Background(), enqueue.ForgeDelivery{JobID: delivery, Job: jobs.Job{
		Kind: jobs.KindForge, Repo: forgeRepo, Flow: "fix", Task: task,
		ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeGitHub, Number: number, DeliveryID: delivery, Trigger: "fix-label"},
	}})
	require.NoError(t, err)
	require.True(t, e.Added, "%s was queued", delivery)
	return e.JobID
}

// records are the run records of jobID, whichever host wrote them.
func (f *forgeFleet) records(jobID string) []jobs.Record {
	var out []jobs.Record
	for _, h := range f.hosts {
		recs, err := jobs.ReadRecords(h.logs, jobID)
		if err == nil {
			out = append(out, recs...)
		}
	}
	return out
}

// wait waits, bounded, for one record of each job, and answers them by job
// id. The bound is generous: it is there to catch a worker that hangs.
func (f *forgeFleet) wait(t *testing.T, ids ...string) map[string]jobs.Record {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if len(f.records(id)) == 0 {
				return false
			}
		}
		return true
	}, 3*time.Minute, 200*time.Millisecond, "no record of every one of %v: the worker hangs", ids)
	out := map[string]jobs.Record{}
	for _, id := range ids {
		recs := f.records(id)
		require.Len(t, recs, 1, "one attempt of %s, on one host", id)
		out[id] = recs[0]
	}
	return out
}

// statusComment waits, bounded, for the status comment of jobID on issue
// number (written right after the record) to say want, and answers it.
func (f *forgeFleet) statusComment(t *testing.T, number int, jobID, want string) string {
	t.Helper()
	marker := "<!-- pidispatch:status job=" + jobID + " -->"
	var found string
	require.Eventually(t, func() bool {
		found = ""
		for _, c := range f.gh.Comments(forgeRepo, number) {
			if strings.Contains(c, marker) {
				if found != "" {
					return false // two comments for one job: never
				}
				found = c
			}
		}
		return strings.Contains(found, want)
	}, 30*time.Second, 50*time.Millisecond, "the status comment of %s never said %q: %q", jobID, want, f.gh.Comments(forgeRepo, number))
	return found
}

// Two deliveries for one issue, enqueued 50 ms apart on a fleet of two hosts
// (one Valkey, one git server and GitHub double, each host its own workspace
// manager), run one after the other fleet-wide in the order they were
// enqueued: the second job is prepared on the first job's commit, so the
// thread's one branch, pi/issue-5, holds both files in two commits on top of
// the base, the first the parent of the second. One pull request carries
// both; each job has one status comment of its own, edited in place.
func TestForgeThreadRunsInEnqueueOrderAcrossTwoHosts(t *testing.T) {
	// A busy thread defers its job for BusyDeferral: short, so the second
	// job does not wait 5 s between two looks at the thread.
	f := startForgeFleet(t, dispatch.Tuning{BusyDeferral: 200 * time.Millisecond}, nil, "forge-host-a", "forge-host-b")
	first := f.enqueue(t, "gh-thread-first", 5, "JOB_WRITE_FILE=a.txt\nJOB_SLEEP=1s\nJOB_PRINT_EXIT_LINE=1")
	time.Sleep(50 * time.Millisecond)
	second := f.enqueue(t, "gh-thread-second", 5, "JOB_WRITE_FILE=b.txt\nJOB_SLEEP=1s\nJOB_PRINT_EXIT_LINE=1")

	recs := f.wait(t, first, second)
	r1, r2 := recs[first], recs[second]
	require.Equal(t, jobs.OutcomeCompleted, r1.Outcome, r1.Reason)
	require.Equal(t, jobs.OutcomeCompleted, r2.Outcome, r2.Reason)
	t.Logf("%s ran on %s, %s on %s", first, r1.Host, second, r2.Host)
	// One after the other: the second job's container started only once the
	// first job's outcome was recorded (and its thread freed after that).
	require.False(t, r2.StartedAt.Before(r1.EndedAt), "the second job started at %s, before the first ended at %s", r2.StartedAt, r1.EndedAt)

	// One branch besides the default one: the thread's.
	dir := f.git.Dir(forgeRepo)
	require.Equal(t, []string{"refs/heads/main", "refs/heads/pi/issue-5"},
		strings.Fields(forgetest.Git(t, dir, "for-each-ref", "--format=%(refname)", "refs/heads")))
	require.Equal(t, f.base, f.git.Head(t, forgeRepo, "main"), "the default branch is never pushed to")
	head := f.git.Head(t, forgeRepo, "pi/issue-5")

	// Two commits on top of the base, in enqueue order: the first job's
	// commit is the second's parent, and the second job was prepared on it.
	require.Equal(t, f.base, r1.BaseCommit)
	require.Equal(t, r1.PushedCommit, r2.BaseCommit, "the second job continued the first one's work")
	require.Equal(t, r2.PushedCommit, head)
	require.Equal(t, "2", forgetest.Git(t, dir, "rev-list", "--count", f.base+".."+head))
	require.Equal(t, head+" "+r1.PushedCommit, forgetest.Git(t, dir, "rev-list", "--parents", "-n", "1", head), "one parent: the first job's commit")
	require.Equal(t, r1.PushedCommit+" "+f.base, forgetest.Git(t, dir, "rev-list", "--parents", "-n", "1", r1.PushedCommit), "one parent: the base")
	require.Contains(t, forgetest.Git(t, dir, "log", "-1", "--format=%B", r1.PushedCommit), "\nJob "+first+"\n")
	require.Contains(t, forgetest.Git(t, dir, "log", "-1", "--format=%B", head), "\nJob "+second+"\n")

	// The branch holds both files; the first commit only the first job's.
	require.Equal(t, []string{"README.md", "a.txt", "b.txt"}, strings.Fields(forgetest.Git(t, dir, "ls-tree", "--name-only", head)))
	require.Equal(t, []string{"README.md", "a.txt"}, strings.Fields(forgetest.Git(t, dir, "ls-tree", "--name-only", r1.PushedCommit)))
	require.Equal(t, "written by jobprog", forgetest.Git(t, dir, "show", head+":a.txt"))
	require.Equal(t, "written by jobprog", forgetest.Git(t, dir, "show", head+":b.txt"))

	// One pull request, opened by the first job and found by the second.
	pulls := f.gh.Pulls(forgeRepo)
	require.Len(t, pulls, 1)
	require.Equal(t, "pi/issue-5", pulls[0].GetHead().GetRef())
	require.Equal(t, pulls[0].GetHTMLURL(), r1.PullRequestURL)
	require.Equal(t, pulls[0].GetHTMLURL(), r2.PullRequestURL)

	// One status comment per job, each the job's own, edited in place to
	// its outcome; nothing else was written on the issue.
	c1 := f.statusComment(t, 5, first, "done. Pull request: "+r1.PullRequestURL)
	c2 := f.statusComment(t, 5, second, "done. Pull request: "+r2.PullRequestURL)
	require.NotContains(t, c1, second)
	require.NotContains(t, c2, first)
	require.Len(t, f.gh.Comments(forgeRepo, 5), 2, "two comments in all: %q", f.gh.Comments(forgeRepo, 5))
	require.GreaterOrEqual(t, f.gh.CommentEdits(), 2, "each job's comment was edited to its outcome, not written again")
}

// A job's hostile outputs, through the real worker: a review.json of 10,000
// inline comments, a 50 MiB comment.md, a comment.md that is a link to
// /etc/passwd and a pr.md that is a FIFO. Each job still completes (its
// change is proposed, its good outputs posted), within a bound that catches
// a hang; nothing of the hostile file reaches the forge; the record says
// the file was refused and why (the worker's own refusals, read bounded
// and never through a link or a FIFO), and so does one line of the status
// comment. A refused pr.md counts as absent: the pull request is titled
// from the issue and the refusal is logged (docs/forge-workspace.md, "The
// pull request's title and body").
func TestForgeJobHostileOutputsAreRefused(t *testing.T) {
	f := startForgeFleet(t, dispatch.Tuning{}, map[string]string{"PI_CONCURRENCY": "5"}, "forge-hostile-1")
	passwd, err := os.ReadFile("/etc/passwd")
	require.NoError(t, err)
	passwdLine, _, _ := strings.Cut(string(passwd), "\n")
	require.NotEmpty(t, passwdLine)

	review := f.enqueue(t, "gh-hostile-review", 11,
		"JOB_WRITE_FILE=a.txt\nJOB_OUT_REVIEW=10000\nJOB_OUT_TEXT=comment.md:a fine comment from the job")
	overMax := f.enqueue(t, "gh-hostile-review-41", 15, "JOB_OUT_REVIEW=41")
	huge := f.enqueue(t, "gh-hostile-huge", 12, fmt.Sprintf("JOB_OUT_BYTES=comment.md:%d", 50<<20))
	link := f.enqueue(t, "gh-hostile-link", 13, "JOB_WRITE_FILE=c.txt\nJOB_OUT_LINK=comment.md:/etc/passwd")
	fifo := f.enqueue(t, "gh-hostile-fifo", 14,
		"JOB_WRITE_FILE=d.txt\nJOB_OUT_TEXT=pr.md:never used\nJOB_WAIT_FILE=/job/out/comment.md")
	// jobprog cannot make a FIFO (it builds for every platform, and the
	// standard library has no portable mkfifo), so while the job waits the
	// test makes one in its output folder on the host, the folder the
	// container has mounted at /job/out: the same FIFO a job would leave.
	// The job first wrote a regular pr.md, which the FIFO replaces.
	var out string
	require.Eventually(t, func() bool {
		if len(f.records(fifo)) > 0 {
			return true // it did not wait: said below
		}
		m, _ := filepath.Glob(filepath.Join(f.hosts[0].jobs, "*", jobs.SanitizeJobID(fifo)+"-*", "job", "out"))
		if len(m) == 1 {
			if _, err := os.Stat(filepath.Join(m[0], "pr.md")); err == nil {
				out = m[0]
			}
		}
		return out != ""
	}, 2*time.Minute, 50*time.Millisecond, "the FIFO job never ran")
	require.Empty(t, f.records(fifo), "the FIFO job ended without waiting for the test: is the job image built from this jobprog?")
	require.NoError(t, os.Remove(filepath.Join(out, "pr.md")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(out, "pr.md"), 0o666))
	// The job waits for comment.md: a plain comment, so the job finishes.
	require.NoError(t, os.WriteFile(filepath.Join(out, "comment.md"), []byte("the FIFO job's comment\n"), 0o644))

	recs := f.wait(t, review, overMax, huge, link, fifo)
	for id, rec := range recs {
		require.Equal(t, jobs.OutcomeCompleted, rec.Outcome, "%s: %s", id, rec.Reason)
		t.Logf("%s outputs: %+v", id, rec.Outputs)
	}
	refused := func(rec jobs.Record, file string) jobs.OutputResult {
		t.Helper()
		for _, o := range rec.Outputs {
			if o.File == file {
				require.Equal(t, jobs.OutputRefused, o.Status, "%s of %s", file, rec.JobID)
				require.NotEmpty(t, o.Reason, "%s of %s", file, rec.JobID)
				return o
			}
		}
		t.Fatalf("%s of %s is not in the record: %+v", file, rec.JobID, rec.Outputs)
		return jobs.OutputResult{}
	}
	posted := func(rec jobs.Record, file string) {
		t.Helper()
		require.Contains(t, rec.Outputs, jobs.OutputResult{File: file, Status: jobs.OutputPosted}, rec.JobID)
	}

	// (a) 10,000 inline comments: refused whole, not one posted; the job's
	// change and its good comment still go.
	r := recs[review]
	require.Contains(t, refused(r, jobs.OutputReview).Reason, "larger than 65536 bytes")
	posted(r, jobs.OutputComment)
	require.NotEmpty(t, r.PullRequestURL)
	status := f.statusComment(t, 11, review, "done. Pull request: "+r.PullRequestURL)
	require.Contains(t, status, "- `review.json` was not posted: ")
	require.Equal(t, 1, strings.Count(status, "was not posted"), status)
	require.Empty(t, f.gh.Reviews(forgeRepo), "no review posted")
	require.Empty(t, f.gh.Replies(forgeRepo), "no reply posted")
	require.Equal(t, []string{status, "a fine comment from the job\n"}, f.gh.Comments(forgeRepo, 11), "the status and the job's good comment")

	// (a') 41 inline comments fit in the bound: the validator refuses them
	// whole (at most 40), on the issue job before it asks for a pull request.
	r = recs[overMax]
	require.Contains(t, refused(r, jobs.OutputReview).Reason, "more than 40 replies and inline comments in all")
	status = f.statusComment(t, 15, overMax, "done.")
	require.Contains(t, status, "- `review.json` was not posted: ")
	require.Equal(t, 1, strings.Count(status, "was not posted"), status)
	require.Len(t, f.gh.Comments(forgeRepo, 15), 1, "the status comment only")
	require.Empty(t, f.gh.Reviews(forgeRepo), "no review posted")

	// (b) 50 MiB: refused at the bound, never read whole into a post; the
	// issue holds the status comment only.
	r = recs[huge]
	require.Contains(t, refused(r, jobs.OutputComment).Reason, "larger than 65536 bytes")
	require.Empty(t, r.PullRequestURL, "it changed nothing")
	status = f.statusComment(t, 12, huge, "done.")
	require.Contains(t, status, "- `comment.md` was not posted: ")
	require.Equal(t, 1, strings.Count(status, "was not posted"), status)
	require.Len(t, f.gh.Comments(forgeRepo, 12), 1, "the status comment only")

	// (c) a link to /etc/passwd: never followed.
	r = recs[link]
	require.Equal(t, "comment.md: not a regular file (too many levels of symbolic links)", refused(r, jobs.OutputComment).Reason,
		"O_NOFOLLOW refused the link, and the reason names no host path")
	require.NotEmpty(t, r.PullRequestURL, "its change still goes")
	status = f.statusComment(t, 13, link, "done. Pull request: "+r.PullRequestURL)
	require.Contains(t, status, "- `comment.md` was not posted: ")
	require.Equal(t, 1, strings.Count(status, "was not posted"), status)
	require.Len(t, f.gh.Comments(forgeRepo, 13), 1, "the status comment only")

	// (d) pr.md a FIFO: the worker does not block on it; the pull request is
	// titled from the issue, and the refusal is logged, recorded and said.
	r = recs[fifo]
	posted(r, jobs.OutputComment)
	require.Contains(t, refused(r, jobs.OutputPullRequest).Reason, "not a regular file")
	require.NotEmpty(t, r.PullRequestURL)
	status = f.statusComment(t, 14, fifo, "done. Pull request: "+r.PullRequestURL)
	require.Contains(t, status, "- `pr.md` was not posted: ")
	var fifoPull string
	for _, p := range f.gh.Pulls(forgeRepo) {
		if p.GetHTMLURL() == r.PullRequestURL {
			fifoPull = p.GetTitle() + "\n" + p.GetBody()
			require.Equal(t, "pi: issue #14", p.GetTitle(), "a refused pr.md counts as absent")
		}
	}
	require.NotEmpty(t, fifoPull, "the FIFO job's pull request")
	require.NotContains(t, fifoPull, "never used")
	var fifoRefusal bool
	for _, l := range f.log.lines("job_output_refused") {
		if l["jobId"] == fifo && l["file"] == jobs.OutputPullRequest {
			fifoRefusal = strings.Contains(fmt.Sprint(l["reason"]), "not a regular file")
		}
	}
	require.True(t, fifoRefusal, "the FIFO pr.md's refusal is logged: %v", f.log.lines("job_output_refused"))

	// Nothing of a hostile file reached the forge: no comment, pull request
	// title or body holds the host's /etc/passwd or filler, and none is
	// larger than a comment.md may be.
	var texts []string
	for n := 11; n <= 15; n++ {
		texts = append(texts, f.gh.Comments(forgeRepo, n)...)
	}
	for _, p := range f.gh.Pulls(forgeRepo) {
		texts = append(texts, p.GetTitle(), p.GetBody())
	}
	for _, rec := range recs {
		for _, o := range rec.Outputs {
			texts = append(texts, o.Reason)
		}
	}
	for _, text := range texts {
		require.NotContains(t, text, f.hosts[0].jobs, "a host path reached the forge or the record")
		require.LessOrEqual(t, len(text), 16<<10, "a post larger than a comment.md may be")
		require.NotContains(t, text, passwdLine)
		require.NotContains(t, text, "root:x:0:0")
		require.NotContains(t, text, "filler-line")
		require.NotContains(t, text, "inline comment 1")  // the review's comments' bodies
		require.NotContains(t, text, "review by jobprog") // and its body
	}
}
