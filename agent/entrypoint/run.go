package entrypoint

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
)

// Exit codes of the container contract.
const (
	ExitCompleted = 0
	ExitInfra     = 1
	ExitPolicy    = 2
)

// Outcomes and reasons the exit line carries: fixed tokens, never free text,
// so the record that stores the line holds nothing a job could inject.
const (
	OutcomeCompleted = "completed"
	OutcomeFailed    = "failed"
	OutcomePolicy    = "policy"

	ReasonCompleted           = "completed"
	ReasonMaxTurns            = "max-turns"
	ReasonCostLimit           = "cost-limit"
	ReasonRefusal             = "refusal"
	ReasonInvalidJob          = "invalid-job"
	ReasonRateLimited         = "rate-limited"
	ReasonProviderError       = "provider-error"
	ReasonProviderUnreachable = "provider-unreachable"
	ReasonAgentCrashed        = "agent-crashed"
	ReasonTerminated          = "terminated"
)

// Fixed paths of the container contract.
const (
	JobFile = "/job/job.json"
	// PromptFile is the prompt the host rendered for a flow job (the flow's
	// template, the operator's instructions, the task or the forge event).
	PromptFile  = "/job/prompt.md"
	Workspace   = "/workspace"
	ModelSocket = "/run/pidispatch/model.sock"
	// SessionDir is the thread's session folder the host may mount.
	SessionDir = "/session"
)

// PromptShownBytes bounds how much of the prompt the transcript shows, so
// a prompt of a few hundred KiB leaves the transcript room for the run.
const PromptShownBytes = 64 << 10

// Options are a run's surroundings; the zero value of each field is the
// image's (see the constants above).
type Options struct {
	JobFile, Workspace, ModelSocket string
	// SessionDir is the thread's session folder the host mounts (default
	// /session); when it is no folder, the run keeps no session.
	SessionDir string
	// PromptFile defaults to prompt.md beside JobFile.
	PromptFile string
	// Pi is the agent's command (default "pi").
	Pi []string
	// Getenv and Environ read the environment (default os.Getenv,
	// os.Environ); the entrypoint passes Environ on to pi.
	Getenv  func(string) string
	Environ func() []string
	Stdout  io.Writer
	Stderr  io.Writer
	// StopGrace is how long pi has to end after SIGTERM (default 3 s, so a
	// container stopped with the worker's 5 s grace still prints its exit line).
	StopGrace time.Duration
	// SettleGrace is how long pi has to exit once it said agent_settled
	// (default 10 s); then it is stopped and the run ends as it settled.
	SettleGrace time.Duration
	// TranscriptBytes bounds what is written to Stderr (default 256 KiB).
	TranscriptBytes int
}

func (o Options) withDefaults() Options {
	o.JobFile = firstOf(o.JobFile, JobFile)
	o.PromptFile = firstOf(o.PromptFile, filepath.Join(filepath.Dir(o.JobFile), filepath.Base(PromptFile)))
	o.Workspace = firstOf(o.Workspace, Workspace)
	o.ModelSocket = firstOf(o.ModelSocket, ModelSocket)
	o.SessionDir = firstOf(o.SessionDir, SessionDir)
	if len(o.Pi) == 0 {
		o.Pi = []string{"pi"}
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Environ == nil {
		o.Environ = os.Environ
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.StopGrace <= 0 {
		o.StopGrace = 3 * time.Second
	}
	if o.SettleGrace <= 0 {
		o.SettleGrace = 10 * time.Second
	}
	if o.TranscriptBytes <= 0 {
		o.TranscriptBytes = 256 << 10
	}
	return o
}

// ExitLine is the telemetry line printed last on stdout. Its "tokens" is an
// object whose "total" older readers take as the token count, so the line
// stays readable by any worker that knows {"turns","tokens","cost"}.
type ExitLine struct {
	Event      string  `json:"event"`
	Outcome    string  `json:"outcome"`
	Reason     string  `json:"reason"`
	Turns      int     `json:"turns"`
	Tokens     Tokens  `json:"tokens"`
	Cost       float64 `json:"cost"`
	Provider   string  `json:"provider,omitempty"`
	Model      string  `json:"model,omitempty"`
	Requests   int     `json:"requests"`
	Retries    int     `json:"retries"`
	MaxTurns   int     `json:"maxTurns,omitempty"`
	DurationMs int64   `json:"durationMs"`
}

// Main runs the job and returns the process exit code. It always prints the
// exit line, also when the job cannot be read or pi cannot be started. ctx
// ending (the container being stopped) stops pi and ends the run as failed.
func Main(ctx context.Context, o Options) int {
	o = o.withDefaults()
	start := time.Now()
	tr := newTranscript(o.Stderr, o.TranscriptBytes, secretValues(o.Environ()))
	line := ExitLine{Event: "exit"}
	code := run(ctx, o, tr, &line)
	line.DurationMs = time.Since(start).Milliseconds()
	line.Cost = math.Round(line.Cost*1e6) / 1e6
	b, _ := json.Marshal(line)
	fmt.Fprintf(tr, "[run %s: %s, %d turns, %d tokens, $%.6f]\n", line.Outcome, line.Reason, line.Turns, line.Tokens.Total, line.Cost)
	fmt.Fprintf(o.Stdout, "\n%s\n", b)
	return code
}

func run(ctx context.Context, o Options, tr io.Writer, line *ExitLine) int {
	job, err := LoadJob(o.JobFile, o.PromptFile, o.Getenv)
	if err != nil {
		fmt.Fprintf(tr, "pi-entrypoint: %v\n", err)
		line.Outcome, line.Reason = OutcomePolicy, ReasonInvalidJob
		return ExitPolicy
	}
	line.MaxTurns, line.Provider, line.Model = job.MaxTurns, job.Provider, job.Model
	fmt.Fprintf(tr, "pi-entrypoint: job %s attempt %d: %s/%s, at most %d turns\n", oneLine(job.JobID, 128), job.Attempt, job.Provider, job.Model, job.MaxTurns)
	showPrompt(tr, job)

	agentDir, err := os.MkdirTemp("", "pi-agent-")
	if err != nil {
		return crashed(tr, line, "agent dir", err)
	}
	defer os.RemoveAll(agentDir)
	env, stopFwd, err := prepareAgent(ctx, o, job, agentDir)
	if err != nil {
		return crashed(tr, line, "prepare pi", err)
	}
	defer stopFwd()

	t, stopped, err := runPi(ctx, o, job, env, o.sessionDir(), tr)
	line.Turns, line.Tokens, line.Cost, line.Requests, line.Retries = t.Turns, t.Tokens, t.Cost, t.Requests, t.Retries
	if t.Provider != "" {
		line.Provider, line.Model = t.Provider, t.Model
	}
	return classify(t, stopped, err, tr, line)
}

// showPrompt writes what pi is asked to the transcript, before anything of
// pi's, so a reader of the run's log sees what the agent was asked. Every
// line is quoted with "> ", so no line of the prompt can pass for the
// entrypoint's or pi's; past PromptShownBytes the rest is only counted.
func showPrompt(tr io.Writer, job Job) {
	prompt := job.Prompt()
	shown := prompt
	if len(shown) > PromptShownBytes {
		cut := PromptShownBytes
		for cut > 0 && !utf8.RuneStart(shown[cut]) {
			cut--
		}
		shown = shown[:cut]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pi-entrypoint: the prompt (from %s, %d bytes), given to pi on its standard input:\n", job.PromptFrom, len(prompt))
	for _, l := range strings.Split(strings.TrimSuffix(shown, "\n"), "\n") {
		b.WriteString("> " + l + "\n")
	}
	if len(shown) < len(prompt) {
		fmt.Fprintf(&b, "pi-entrypoint: [the prompt goes on: %d of its %d bytes shown here; pi was given all of it]\n", len(shown), len(prompt))
	}
	_, _ = io.WriteString(tr, b.String())
}

func crashed(tr io.Writer, line *ExitLine, what string, err error) int {
	fmt.Fprintf(tr, "pi-entrypoint: %s: %v\n", what, err)
	line.Outcome, line.Reason = OutcomeFailed, ReasonAgentCrashed
	return ExitInfra
}

// classify maps how pi ended to the exit protocol. stopped is the reason the
// entrypoint stopped pi itself ("" when pi ended on its own).
func classify(t Tally, stopped string, waitErr error, tr io.Writer, line *ExitLine) int {
	switch {
	case stopped == ReasonMaxTurns || stopped == ReasonCostLimit:
		line.Outcome, line.Reason = OutcomePolicy, stopped
		return ExitPolicy
	case stopped != "":
		line.Outcome, line.Reason = OutcomeFailed, stopped
		return ExitInfra
	case waitErr != nil:
		fmt.Fprintf(tr, "pi-entrypoint: pi ended abnormally: %v\n", waitErr)
		line.Outcome, line.Reason = OutcomeFailed, ReasonAgentCrashed
		return ExitInfra
	case t.Requests == 0:
		fmt.Fprintln(tr, "pi-entrypoint: pi ended without asking the model anything")
		line.Outcome, line.Reason = OutcomeFailed, ReasonAgentCrashed
		return ExitInfra
	case !t.Settled:
		// pi 1.x ends every run it finishes with agent_settled.
		fmt.Fprintln(tr, "pi-entrypoint: pi ended before its run settled")
		line.Outcome, line.Reason = OutcomeFailed, ReasonAgentCrashed
		return ExitInfra
	case t.LastStop == "error" || t.LastStop == "aborted":
		line.Reason = ErrorReason(t.LastError)
		if line.Reason == ReasonRefusal {
			line.Outcome = OutcomePolicy
			return ExitPolicy
		}
		line.Outcome = OutcomeFailed
		return ExitInfra
	}
	line.Outcome, line.Reason = OutcomeCompleted, ReasonCompleted
	return ExitCompleted
}

// ErrorReason sorts the error of pi's last model request. pi prefixes a
// provider's HTTP error with its status; a stream the provider itself ended
// with an error stop reason (Anthropic's "refusal" or "sensitive") carries no
// status and pi's generic message: that is the model declining, a policy
// outcome. Everything else is infrastructure.
func ErrorReason(msg string) string {
	lower := strings.ToLower(msg)
	status, _ := strconv.Atoi(strings.SplitN(msg+" ", " ", 2)[0])
	switch {
	case status == 429 || strings.Contains(lower, "rate limit") || strings.Contains(lower, "rate_limit"):
		return ReasonRateLimited
	case status >= 400:
		return ReasonProviderError
	case msg == "An unknown error occurred":
		return ReasonRefusal
	case strings.Contains(lower, "overloaded"):
		return ReasonProviderError
	}
	return ReasonProviderUnreachable
}

// runPi starts pi, follows its events until it exits, and stops it when the
// job's turn or cost limit is reached or ctx ends. stopped names why the
// entrypoint stopped it ("" when it ended by itself).
func runPi(ctx context.Context, o Options, job Job, env []string, sessionDir string, tr io.Writer) (t Tally, stopped string, err error) {
	p := &piRun{o: o, tr: tr}
	out, err := p.start(job, env, sessionDir)
	if err != nil {
		return t, "", err
	}
	p.stopWhenAsked(ctx)
	p.stopAfterSettle()
	asked := p.follow(out, &t, job)
	t.Finish()
	err = p.cmd.Wait()
	<-p.fed
	p.stderr.Flush()
	p.release(asked)
	if asked == "" && ctx.Err() != nil {
		asked = ReasonTerminated
	}
	if asked != "" || p.settleHalted.Load() {
		err = nil // pi ended because it was told to
	}
	return t, asked, err
}

// piRun is one run of pi: its process and what its stoppers share.
type piRun struct {
	o      Options
	tr     io.Writer
	cmd    *exec.Cmd
	stderr *lineWriter
	// fed is closed once the prompt was written to pi's stdin, or the
	// write ended because pi exited without reading it.
	fed chan struct{}
	// stop asks for pi to be stopped, with the reason ("" for no stop);
	// halted is closed once that request, or ctx's end, is dealt with.
	stop   chan string
	halted chan struct{}
	// settled is closed when pi's run settles; settleHalted is set when pi
	// was then stopped for not exiting.
	settled      chan struct{}
	afterSettle  sync.WaitGroup
	settleHalted atomic.Bool
}

// start starts pi in its own process group, so a stop reaches its children,
// gives it the prompt on its stdin, and returns its stdout.
func (p *piRun) start(job Job, env []string, sessionDir string) (io.Reader, error) {
	cmd := exec.Command(p.o.Pi[0], append(append([]string{}, p.o.Pi[1:]...), job.Args(sessionDir)...)...)
	cmd.Dir = p.o.Workspace
	cmd.Env = env
	newGroup(cmd)
	p.stderr = &lineWriter{w: p.tr}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.cmd = cmd
	p.fed = feed(in, job.Prompt())
	return out, nil
}

// feed writes the prompt to pi's stdin and closes it. pi reads piped stdin
// to its end as its first message (trimmed) before it starts, and a pipe,
// unlike an argument, has no size limit and no '-' or '@' that pi's
// argument parser would take for a flag or a file. The write goes on in
// the background, since a pipe holds 64 KiB and pi reads only once it is
// up; a pi that exits without reading ends it when Wait closes the pipe.
func feed(w io.WriteCloser, prompt string) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.WriteString(w, prompt)
		_ = w.Close()
	}()
	return done
}

// stopWhenAsked stops pi when a limit asks for it or ctx ends, so a stopped container still ends its run.
func (p *piRun) stopWhenAsked(ctx context.Context) {
	p.stop, p.halted = make(chan string, 1), make(chan struct{})
	go func() {
		defer close(p.halted)
		var why string
		select {
		case why = <-p.stop:
		case <-ctx.Done():
			why = ReasonTerminated
		}
		if why == "" {
			return
		}
		fmt.Fprintf(p.tr, "pi-entrypoint: stopping pi: %s\n", why)
		haltGroup(p.cmd.Process.Pid, p.o.StopGrace)
	}()
}

// stopAfterSettle stops pi SettleGrace after its run settled, since a settled pi only tidies up.
func (p *piRun) stopAfterSettle() {
	// One that does not exit (or leaves a child holding its output open) is
	// stopped, and the run ends as it settled.
	p.settled = make(chan struct{})
	p.afterSettle.Add(1)
	go func() {
		defer p.afterSettle.Done()
		select {
		case <-p.settled:
		case <-p.halted:
			return
		}
		select {
		case <-time.After(p.o.SettleGrace):
			p.settleHalted.Store(true)
			fmt.Fprintf(p.tr, "pi-entrypoint: pi did not exit %v after its run settled: stopping it\n", p.o.SettleGrace)
			haltGroup(p.cmd.Process.Pid, p.o.StopGrace)
		case <-p.halted:
		}
	}()
}

// follow tallies pi's events until its output ends, asking for a stop at a turn past the job's limits.
func (p *piRun) follow(out io.Reader, t *Tally, job Job) (asked string) {
	maxCost, _ := job.maxCost()
	readEvents(out, func(ev []byte) {
		wasSettled := t.Settled
		step := t.Feed(ev, p.tr)
		if t.Settled && !wasSettled {
			close(p.settled)
		}
		if asked != "" || !step.TurnEnded || !step.Continues {
			return
		}
		switch {
		case t.Turns >= job.MaxTurns:
			asked = ReasonMaxTurns
		case maxCost > 0 && t.Cost >= maxCost:
			asked = ReasonCostLimit
		default:
			return
		}
		p.stop <- asked
	})
	return asked
}

// release ends the stoppers once pi exited, so none halts a process group after runPi returns.
func (p *piRun) release(asked string) {
	if asked == "" {
		select {
		case p.stop <- "":
		default:
		}
	}
	<-p.halted
	p.afterSettle.Wait()
}

// readEvents calls fn with each line of r. Lines longer than 64 MiB (a
// runaway agent_end) are skipped.
func readEvents(r io.Reader, fn func([]byte)) {
	br := bufio.NewReaderSize(r, 1<<20)
	var line []byte
	skip := false
	for {
		chunk, err := br.ReadSlice('\n')
		if skip = skip || len(line)+len(chunk) > 64<<20; !skip {
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(line) > 0 && !skip {
			fn(line)
		}
		line, skip = line[:0], false
		if err != nil {
			_, _ = io.Copy(io.Discard, r)
			return
		}
	}
}

// Exec replaces the process with args[0] found on PATH, so the image runs
// a command given to it (`docker run <image> pi --version`) instead of a
// job. It returns only on failure.
func Exec(args []string, environ []string) error {
	path, err := exec.LookPath(args[0])
	if err != nil {
		return err
	}
	return syscall.Exec(path, args, environ)
}

// sessionDir is the host's session folder when it mounted one, else "": the
// session is kept outside the workspace, so it is never committed.
func (o Options) sessionDir() string {
	if fi, err := os.Stat(o.SessionDir); err == nil && fi.IsDir() {
		return o.SessionDir
	}
	return ""
}
