package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/valkey"
)

// The kill switch (pause, resume, status) and its siblings (hosts, cancel)
// read only VALKEY_URL and VALKEY_PASSWORD, never config.Load: no
// other misconfiguration may stop an operator from stopping spend. Their
// client fails fast, so a dead Valkey is reported in seconds, not hung on.
const (
	// ksCommandTimeout bounds a whole command (cancel adds its --wait): a
	// Valkey that accepts connections and never answers costs a transaction
	// two read timeouts (valkey.OneShotTimeout), after the fleet read's own
	// budget.
	ksCommandTimeout = 4500 * time.Millisecond
	// ksUnreachableFix is the one-line fix printed with an unreachable Valkey.
	ksUnreachableFix = "(start it, or point VALKEY_URL at it)"
	pauseMessage     = "paused — worker will stop taking new jobs (jobs still enqueue)"
	resumeMessage    = "resumed"
)

func init() {
	register(command{name: "pause", killSwitch: true, summary: "pause every queue of the fleet (jobs still enqueue)", help: pauseHelp, run: runPause})
	register(command{name: "resume", killSwitch: true, summary: "resume every queue of the fleet", help: resumeHelp, run: runResume})
	register(command{name: "status", killSwitch: true, summary: "pause state and job counts of the fleet by outcome (--per-queue, --json)", help: statusHelp, run: runStatus})
}

// quietRedis silences go-redis's own logger, which otherwise prints a line
// per failed dial to the process's stderr before our one clean message.
var quietRedis sync.Once

type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}

// ksConnect builds the kill switch's client. It returns the URL as it may be
// shown (password redacted), or a non-zero exit code after printing why.
func ksConnect(e env, cmd string) (*redis.Client, string, int) {
	quietRedis.Do(func() { redis.SetLogger(discardRedisLog{}) })
	raw := e.getenv("VALKEY_URL")
	if raw == "" {
		raw = config.DefaultValkeyURL
	}
	shown := config.RedactURL(raw)
	client, err := valkey.NewClient(raw, valkey.Options{Password: e.getenv("VALKEY_PASSWORD"), OneShot: true, PoolSize: 4})
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch %s: VALKEY_URL=%s is %v\n", cmd, shown, err)
		return nil, shown, exitUsage
	}
	return client, shown, exitOK
}

// ksAuthRefused prints, when err is the server refusing the password, that
// what could not be done and the fix, then extra lines, and reports whether
// it did. A refused password is not an outage: "is it running?" would send
// the operator the wrong way.
func ksAuthRefused(w io.Writer, what, url string, err error, extra ...string) bool {
	var ae *valkey.AuthError
	if !errors.As(err, &ae) {
		return false
	}
	answer, _, _ := strings.Cut(ae.Reply, " ")
	fmt.Fprintf(w, "could not %s at %s: %v\n  (the server answered %s)\n", what, url, valkey.ErrAuthRefused, answer)
	for _, line := range extra {
		fmt.Fprintf(w, "  %s\n", line)
	}
	return true
}

// ksUnreachable prints the one message every kill-switch command gives when
// Valkey cannot be reached, and returns exitFailure.
func ksUnreachable(w io.Writer, url string, err error, extra ...string) int {
	if ksAuthRefused(w, "use Valkey", url, err, extra...) {
		return exitFailure
	}
	fmt.Fprintf(w, "could not reach Valkey at %s — is it running? %s\n  %v\n", url, ksUnreachableFix, err)
	for _, line := range extra {
		fmt.Fprintf(w, "  %s\n", line)
	}
	return exitFailure
}

// isReply reports an error answered by the server (it is reachable).
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// noArgs refuses arguments to a command that takes none.
func noArgs(e env, cmd string, args []string) (int, bool) {
	if len(args) == 0 {
		return 0, true
	}
	if args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(e.stdout, "usage: pi-dispatch %s\n", cmd)
		return exitOK, false
	}
	fmt.Fprintf(e.stderr, "pi-dispatch %s: unexpected argument %q (usage: pi-dispatch %s)\n", cmd, args[0], cmd)
	return exitUsage, false
}

func runPause(ctx context.Context, e env, args []string) int {
	return runKill(ctx, e, args, "pause")
}

func runResume(ctx context.Context, e env, args []string) int {
	return runKill(ctx, e, args, "resume")
}

func runKill(ctx context.Context, e env, args []string, verb string) int {
	if code, ok := noArgs(e, verb, args); !ok {
		return code
	}
	client, url, code := ksConnect(e, verb)
	if code != exitOK {
		return code
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, ksCommandTimeout)
	defer cancel()
	set, err := operator.FleetQueues(ctx, client)
	if err != nil {
		return ksUnreachable(e.stderr, url, err, "nothing changed")
	}
	act := operator.Pause
	if verb == "resume" {
		act = operator.Resume
	}
	res, err := act(ctx, client, set)
	var ke *operator.KillError
	switch {
	case errors.As(err, &ke):
		printKillFailure(e.stderr, url, set, ke.Result)
		return exitFailure
	case err != nil:
		outcome := "the outcome is unknown: run `pi-dispatch status` once Valkey answers"
		if res.NotSent {
			outcome = "nothing changed"
		}
		if ksAuthRefused(e.stderr, verb+" the deployment", url, err, outcome) {
			return exitFailure
		}
		return ksUnreachable(e.stderr, url, err, outcome)
	}
	msg := pauseMessage
	if verb == "resume" {
		msg = resumeMessage
	}
	fmt.Fprintf(e.stdout, "%s%s\n", msg, killSpan(len(res.Queues), set, res.SweepErr))
	notifyFleet(ctx, e, verb)
	return exitOK
}

// killSpan is the suffix of the pause and resume lines: how many queues were
// acted on (when more than one) and any degraded read, named.
func killSpan(n int, set operator.QueueSet, sweepErr error) string {
	var b strings.Builder
	if n > 1 {
		fmt.Fprintf(&b, " [%d queues]", n)
	}
	if set.RegistryErr != nil {
		fmt.Fprintf(&b, " [registry unreadable: %v]", set.RegistryErr)
	}
	switch {
	case set.DiscoveryErr != nil:
		fmt.Fprintf(&b, " [queue discovery incomplete: %v]", set.DiscoveryErr)
	case sweepErr != nil:
		fmt.Fprintf(&b, " [queue discovery incomplete after the change: %v]", sweepErr)
	}
	return b.String()
}

// printKillFailure says exactly what a refused-in-part pause or resume
// changed and where it failed, so an operator knows to finish the job rather
// than walk away from a fleet with one host still spending.
func printKillFailure(w io.Writer, url string, set operator.QueueSet, r operator.KillResult) {
	fmt.Fprintf(w, "could not %s the whole deployment at %s\n", r.Verb, url)
	switch {
	case len(r.Changed) > 0:
		fmt.Fprintf(w, "  %sd: %s\n", r.Verb, strings.Join(r.Changed, ", "))
	case !r.FlagChanged:
		fmt.Fprintln(w, "  nothing changed")
	default:
		fmt.Fprintln(w, "  no queue changed")
	}
	switch {
	case r.FlagErr != nil:
		fmt.Fprintf(w, "  fleet pause flag unchanged: %v\n", r.FlagErr)
	case r.Verb == "pause":
		fmt.Fprintln(w, "  fleet pause flag: set (host queues declared from now on start paused)")
	default:
		fmt.Fprintln(w, "  fleet pause flag: cleared")
	}
	if len(r.Failed) > 0 {
		names := make([]string, len(r.Failed))
		for i, f := range r.Failed {
			names[i] = f.Queue
		}
		fmt.Fprintf(w, "  failed at: %s\n", strings.Join(names, ", "))
		for _, f := range r.Failed {
			fmt.Fprintf(w, "  %v\n", f.Err)
		}
	}
	if s := strings.TrimSpace(killSpan(0, set, r.SweepErr)); s != "" {
		fmt.Fprintf(w, "  %s\n", s)
	}
}

// writeJSONLine prints v as one JSON line, without HTML escaping (the line is
// read by people and scripts, not embedded in a page).
func writeJSONLine(e env, cmd string, v any) int {
	enc := json.NewEncoder(e.stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch %s: %v\n", cmd, err)
		return exitFailure
	}
	return exitOK
}
