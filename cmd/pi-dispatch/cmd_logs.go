package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/observe/transcript"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/redis/go-redis/v9"
)

func init() {
	register(command{name: "logs", summary: "what a job's agent did: its transcript, or a running job's live events (--follow)", help: logsHelp, run: runLogs})
}

const logsUsage = "usage: pi-dispatch logs <jobId> [--attempt N] [--follow] [--json]"

const logsHelp = logsUsage + `

Shows the transcript of one attempt of a job, for a person: each line the
job printed with its time, the agent's turns and tool calls, each model call
with its tokens and cost, then a summary (turns, tool calls, files edited,
model calls and their dollars). Every value of the job's secrets profile and
every provider key was redacted before the transcript was written.

A finished attempt's transcript is kept beside its run record in PI_LOGS_DIR
of the host that ran it; a running or recent one is also read from Valkey,
from any host. --follow prints a running attempt's events as they come, from
whichever host runs it, until the attempt ends (or Ctrl-C).

flags:
  --attempt N       the attempt (default: the newest one kept)
  --follow          stream the running attempt's events until it ends
  --json            print the entries as JSON lines, for machines
  --env-file PATH   the env file under the shell's variables, instead of
                    $PI_ENV_FILE or ./.env ("" reads none)

With PI_FLEET_KEY_FILE, a live entry the fleet key did not sign is not
shown (and said once on stderr).

Reads VALKEY_URL, VALKEY_PASSWORD, PI_LOGS_DIR and PI_FLEET_KEY_FILE. See docs/logs-and-notifications.md.
`

func runLogs(ctx context.Context, e env, args []string) int {
	e, la, code, done := parseLogsArgs(e, args)
	if done {
		return code
	}
	out := entryWriter(e.stdout, la.asJSON)
	if !la.follow && printStored(e, la.jobID, la.attempt, out) {
		return exitOK
	}
	client, url, code := ksConnect(e, "logs")
	if code != exitOK {
		return code
	}
	defer client.Close()
	key, code := fleetKeyFromEnv(e, "logs")
	if code != exitOK {
		return code
	}
	// With the fleet key, only entries it signed are shown: a Valkey writer
	// without it cannot put lines in front of the operator.
	live := transcript.NewLiveWith(client, transcript.LiveConfig{Key: key,
		Logger: slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if !la.follow {
		return printRecent(ctx, e, live, url, la.jobID, la.attempt, out)
	}
	if known, code := jobKnown(ctx, e, client, live, url, la.jobID); !known {
		return code
	}
	return followLive(ctx, e, live, url, la.jobID, la.attempt, out)
}

// logsArgs is what the logs command's arguments ask for.
type logsArgs struct {
	jobID   string
	attempt int // 0: the newest kept
	follow  bool
	asJSON  bool
}

// parseLogsArgs reads logs' arguments and layers the env file --env-file names; done means the command ends with code.
func parseLogsArgs(e env, args []string) (env, logsArgs, int, bool) {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	attempt := fs.Int("attempt", 0, "the attempt (default: the newest kept)")
	follow := fs.Bool("follow", false, "stream the running attempt's events")
	asJSON := fs.Bool("json", false, "JSON lines")
	envFile := envFileFlag(fs)
	pos, code := parseFlags(e, fs, args, logsUsage)
	if code >= 0 {
		return e, logsArgs{}, code, true
	}
	switch {
	case len(pos) != 1:
		fmt.Fprintf(e.stderr, "pi-dispatch logs: give one job id (%s)\n", logsUsage)
		return e, logsArgs{}, exitUsage, true
	case fleet.CheckJobID(pos[0]) != nil:
		fmt.Fprintf(e.stderr, "pi-dispatch logs: %q is not a job id: %v\n", pos[0], fleet.CheckJobID(pos[0]))
		return e, logsArgs{}, exitUsage, true
	case *attempt < 0:
		fmt.Fprintf(e.stderr, "pi-dispatch logs: --attempt must be 1 or more (%s)\n", logsUsage)
		return e, logsArgs{}, exitUsage, true
	}
	e, err := applyEnvFileFlag(fs, e, *envFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch logs: %v\n", err)
		return e, logsArgs{}, exitUsage, true
	}
	return e, logsArgs{jobID: pos[0], attempt: *attempt, follow: *follow, asJSON: *asJSON}, exitOK, false
}

// printStored prints the attempt's transcript from this host's logs folder and reports whether it had one.
func printStored(e env, jobID string, attempt int, out *entryOut) bool {
	cfg, _ := operator.ConfigForDoctor(e.getenv)
	entries, ok := storedTranscript(cfg.LogsDir, jobID, attempt)
	if !ok {
		return false
	}
	for _, en := range entries {
		out.entry(en)
	}
	out.done()
	return true
}

// followLive prints the attempt's live events as they come until it ends (want 0: the newest, or the first to print).
// jobKnown says, before a follow waits, whether there is anything to wait
// for: the job on a queue of the fleet, or a live transcript of it. A job
// known nowhere is said at once (exit 1), never waited for.
func jobKnown(ctx context.Context, e env, client redis.UniversalClient, live *transcript.Live, url, jobID string) (bool, int) {
	if n, err := live.Latest(ctx, jobID); err == nil && n > 0 {
		return true, exitOK
	}
	dir, err := queue.NewDirectory(client, queue.Config{})
	if err != nil {
		return false, logsValkeyFailed(e, url, err)
	}
	_, job, err := dir.Find(ctx, jobID)
	switch {
	case errors.Is(err, queue.ErrNotFound):
		fmt.Fprintf(e.stderr, "pi-dispatch logs: no job %s on any queue of the fleet, and no transcript of it: nothing to follow (check the id with pi-dispatch runs)\n", jobID)
		return false, exitFailure
	case err != nil:
		return false, logsValkeyFailed(e, url, err)
	case job.State == queue.StateCompleted || job.State == queue.StateFailed:
		fmt.Fprintf(e.stderr, "pi-dispatch logs: job %s has ended (%s) and its live transcript is gone: run pi-dispatch logs %s on the host that ran it\n", jobID, job.State, jobID)
		return false, exitFailure
	}
	return true, exitOK
}

func followLive(ctx context.Context, e env, live *transcript.Live, url, jobID string, want int, out *entryOut) int {
	if want == 0 {
		var err error
		if want, err = live.Latest(ctx, jobID); err != nil {
			return logsValkeyFailed(e, url, err)
		}
		if want == 0 {
			fmt.Fprintf(e.stderr, "waiting for job %s to print (Ctrl-C to stop)\n", jobID)
		}
	}
	err := live.Follow(ctx, jobID, func(en transcript.Entry) bool {
		if want == 0 {
			want = en.Attempt
		}
		if en.Attempt != want {
			return true
		}
		if en.Kind == transcript.KindEnd {
			return false
		}
		out.entry(en)
		return true
	})
	out.done()
	switch {
	case errors.Is(err, context.Canceled):
		return exitOK
	case err != nil:
		return logsValkeyFailed(e, url, err)
	}
	return exitOK
}

// storedTranscript reads the attempt's transcript from this host's logs
// folder (the newest attempt kept when attempt is 0).
func storedTranscript(dir, jobID string, attempt int) ([]transcript.Entry, bool) {
	if attempt == 0 {
		all, err := transcript.Attempts(dir, jobID)
		if err != nil || len(all) == 0 {
			return nil, false
		}
		attempt = all[len(all)-1]
	}
	entries, err := transcript.Read(dir, jobID, attempt)
	return entries, err == nil
}

// printRecent prints what the live stream still holds of the attempt.
func printRecent(ctx context.Context, e env, live *transcript.Live, url, jobID string, attempt int, out *entryOut) int {
	ctx, cancel := context.WithTimeout(ctx, ksCommandTimeout)
	defer cancel()
	entries, err := live.Recent(ctx, jobID)
	if err != nil {
		return logsValkeyFailed(e, url, err)
	}
	if attempt == 0 {
		for _, en := range entries {
			attempt = max(attempt, en.Attempt)
		}
	}
	entries = slices.DeleteFunc(entries, func(en transcript.Entry) bool { return en.Attempt != attempt || en.Kind == transcript.KindEnd })
	if len(entries) == 0 {
		fmt.Fprintf(e.stderr, "pi-dispatch logs: no transcript of job %s here (PI_LOGS_DIR) nor in Valkey: a transcript is kept on the host that ran the job (pi-dispatch runs shows which); a running job's shows with --follow\n", jobID)
		return exitFailure
	}
	for _, en := range entries {
		out.entry(en)
	}
	out.done()
	return exitOK
}

func logsValkeyFailed(e env, url string, err error) int {
	if !ksAuthRefused(e.stderr, "read the live transcript", url, err) {
		fmt.Fprintf(e.stderr, "pi-dispatch logs: valkey at %s: %v\n", url, err)
	}
	return exitFailure
}

// entryOut prints entries for a person or as JSON lines.
type entryOut struct {
	w    io.Writer
	json bool
	r    *transcript.Renderer
	n    int // entries written
}

func entryWriter(w io.Writer, asJSON bool) *entryOut {
	return &entryOut{w: w, json: asJSON, r: transcript.NewRenderer(w)}
}

func (o *entryOut) entry(en transcript.Entry) {
	o.n++
	if o.json {
		b, _ := json.Marshal(en)
		fmt.Fprintf(o.w, "%s\n", b)
		return
	}
	o.r.Entry(en)
}

func (o *entryOut) done() {
	if !o.json && o.n > 0 {
		o.r.Summary()
	}
}
