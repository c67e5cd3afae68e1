package entrypoint

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
)

// The testdata/pi-*.jsonl files are pi 1.6.0's own --mode json output,
// recorded by TestRecordPiRuns against internal/testkit/fakeprovider: pi-hello (a
// write tool call, then a final answer), pi-500 and pi-429 (every request
// refused; pi retries once), pi-retry (one 529, then pi's retry is
// answered), pi-loop (an agent that calls a tool six times), pi-compaction
// (a small context window: pi summarises after the first turn).

func feedFile(t *testing.T, name string) (Tally, string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var tally Tally
	var tr bytes.Buffer
	readEvents(bytes.NewReader(data), func(line []byte) { tally.Feed(line, &tr) })
	return tally, tr.String()
}

func TestTallySumsUsageOfEveryAssistantMessage(t *testing.T) {
	tally, tr := feedFile(t, "pi-hello.jsonl")
	// What the fake provider reported: {1200,40,300,100} then {1300,12,1500,0}.
	want := Tokens{Input: 2500, Output: 52, CacheRead: 1800, CacheWrite: 100, Total: 4452}
	if tally.Tokens != want {
		t.Fatalf("tokens = %+v, want %+v", tally.Tokens, want)
	}
	// claude-haiku-4-5 is priced $1 / $5 / $0.10 / $1.25 per million.
	wantCost := (2500*1 + 52*5 + 1800*0.1 + 100*1.25) / 1e6
	if math.Abs(tally.Cost-wantCost) > 1e-12 {
		t.Fatalf("cost = %v, want %v", tally.Cost, wantCost)
	}
	if tally.Turns != 2 || tally.Requests != 2 || tally.Provider != "anthropic" || tally.Model != "claude-haiku-4-5" || tally.LastStop != "stop" {
		t.Fatalf("tally = %+v", tally)
	}
	for _, s := range []string{"tool write hello.txt", "assistant: Done: wrote hello.txt."} {
		if !strings.Contains(tr, s) {
			t.Errorf("transcript lacks %q:\n%s", s, tr)
		}
	}
	if strings.Contains(tr, "hello from pi") {
		t.Errorf("transcript shows a written file's content:\n%s", tr)
	}
}

func TestClassifyRecordedRuns(t *testing.T) {
	for _, tc := range []struct {
		file, outcome, reason string
		code, retries         int
	}{
		{"pi-hello.jsonl", OutcomeCompleted, ReasonCompleted, ExitCompleted, 0},
		{"pi-500.jsonl", OutcomeFailed, ReasonProviderError, ExitInfra, 1},
		{"pi-429.jsonl", OutcomeFailed, ReasonRateLimited, ExitInfra, 1},
		{"pi-retry.jsonl", OutcomeCompleted, ReasonCompleted, ExitCompleted, 1},
		{"pi-compaction.jsonl", OutcomeCompleted, ReasonCompleted, ExitCompleted, 0},
		{"pi-loop.jsonl", OutcomeCompleted, ReasonCompleted, ExitCompleted, 0},
	} {
		tally, _ := feedFile(t, tc.file)
		var line ExitLine
		code := classify(tally, "", nil, io.Discard, &line)
		if code != tc.code || line.Outcome != tc.outcome || line.Reason != tc.reason || tally.Retries != tc.retries {
			t.Errorf("%s: code %d %s/%s retries %d, want %d %s/%s retries %d", tc.file, code, line.Outcome, line.Reason, tally.Retries, tc.code, tc.outcome, tc.reason, tc.retries)
		}
	}
}

// A request the provider refused and pi retried counts as a request with no
// usage; the retry's answer is the run's only usage, and the retried error
// turn is no turn.
func TestTallyCountsARetriedRunOnce(t *testing.T) {
	tally, tr := feedFile(t, "pi-retry.jsonl")
	want := Tokens{Input: 900, Output: 7, CacheRead: 100, Total: 1007}
	if tally.Tokens != want || tally.Requests != 2 || tally.Retries != 1 || tally.Turns != 1 || !tally.Settled || tally.LastStop != "stop" {
		t.Fatalf("tally = %+v", tally)
	}
	if wantCost := (900*1 + 7*5 + 100*0.1) / 1e6; math.Abs(tally.Cost-wantCost) > 1e-12 {
		t.Fatalf("cost = %v, want %v", tally.Cost, wantCost)
	}
	if !strings.Contains(tr, "[provider error, pi retries (attempt 1): 529") {
		t.Errorf("transcript does not show the retry:\n%s", tr)
	}
}

// pi's compaction summary is a billed request outside any assistant
// message: its usage (compaction_end's result) counts with the turns'.
func TestTallyCountsCompaction(t *testing.T) {
	tally, tr := feedFile(t, "pi-compaction.jsonl")
	// Reported by the fake provider: the turn {3500,40}, the summary
	// {600,30}, the last turn {400,3}.
	want := Tokens{Input: 4500, Output: 73, Total: 4573}
	if tally.Tokens != want || tally.Requests != 3 || tally.Compactions != 1 || tally.Turns != 2 || !tally.Settled {
		t.Fatalf("tally = %+v", tally)
	}
	if wantCost := (4500*1 + 73*5) / 1e6; math.Abs(tally.Cost-wantCost) > 1e-12 {
		t.Fatalf("cost = %v, want %v", tally.Cost, wantCost)
	}
	if !strings.Contains(tr, "[pi compacts its context (threshold)]") || !strings.Contains(tr, "[pi compacted 3548 tokens of context]") {
		t.Errorf("transcript does not show the compaction:\n%s", tr)
	}
}

// message_update's usage is a running total of the message in flight: it
// never adds to the message_end that follows, and it counts only for a
// message whose message_end never came (pi killed mid-answer).
func TestTallyRunningTotalsCountOnlyForACutMessage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "pi-hello.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	updates, ends := 0, 0
	cut := -1
	for i, l := range lines {
		if strings.Contains(l, `"type":"message_update"`) && strings.Contains(l, `"usage":{"input":`) {
			updates++
		}
		if strings.Contains(l, `"type":"message_end"`) && strings.Contains(l, `"role":"assistant"`) {
			if ends++; ends == 2 {
				cut = i
			}
		}
	}
	if updates < 2 || cut < 0 {
		t.Fatalf("the recording has %d usage updates and %d assistant ends", updates, ends)
	}
	var whole Tally
	for _, l := range lines {
		whole.Feed([]byte(l), io.Discard)
	}
	whole.Finish()
	if whole.Tokens.Total != 4452 || whole.Requests != 2 {
		t.Fatalf("whole run: %+v", whole.Tokens)
	}
	var part Tally
	for _, l := range lines[:cut] {
		part.Feed([]byte(l), io.Discard)
	}
	part.Finish()
	// The first message's 1640, and the second's last running total: 2812.
	if part.Tokens.Total != 1640+2812 || part.Requests != 2 || part.Settled {
		t.Fatalf("cut run: requests %d, tokens %+v", part.Requests, part.Tokens)
	}
}

func TestErrorReason(t *testing.T) {
	for msg, want := range map[string]string{
		`429 {"type":"error"}`:      ReasonRateLimited,
		`500 {"type":"error"}`:      ReasonProviderError,
		`529 overloaded`:            ReasonProviderError,
		`401 invalid x-api-key`:     ReasonProviderError,
		"An unknown error occurred": ReasonRefusal,
		"Connection error.":         ReasonProviderUnreachable,
		"fetch failed":              ReasonProviderUnreachable,
		"Overloaded":                ReasonProviderError,
	} {
		if got := ErrorReason(msg); got != want {
			t.Errorf("ErrorReason(%q) = %s, want %s", msg, got, want)
		}
	}
}

func TestParseJob(t *testing.T) {
	env := map[string]string{"PI_AGENT_MODEL": "claude-haiku-4-5", "PI_AGENT_THINKING": "low"}
	j, err := ParseJob([]byte(`{"jobId":"a","kind":"local","task":"-rf everything","excludeTools":["bash"],"unknown":1}`), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	args := j.Args("")
	// The prompt is not an argument (pi reads it from stdin), so a task
	// that looks like a flag needs no escaping. Without the host's session
	// folder, no session is kept.
	want := []string{"--mode", "json", "--approve", "--provider", "anthropic", "--model", "claude-haiku-4-5", "--thinking", "low",
		"--tools", "read,edit,write,grep,find,ls", "--no-session"}
	if !slices.Equal(args, want) {
		t.Fatalf("args = %q\nwant   %q", args, want)
	}
	// With it, a new session is kept there for the thread's next job.
	if args := j.Args("/session"); !slices.Equal(args[len(args)-2:], []string{"--session-dir", "/session"}) || slices.Contains(args, "--continue") {
		t.Fatalf("session args = %q", args)
	}
	if j.MaxTurns != DefaultMaxTurns || j.Prompt() != "-rf everything" {
		t.Fatalf("maxTurns = %d, prompt %q", j.MaxTurns, j.Prompt())
	}
	j.Resume, j.Command, j.Task = true, "review", "the diff"
	if args := j.Args("/s"); !slices.Equal(args[len(args)-3:], []string{"--continue", "--session-dir", "/s"}) || j.Prompt() != "/review the diff" {
		t.Fatalf("resume args = %q, prompt %q", args, j.Prompt())
	}
	for _, bad := range []string{`{"task":`, `{"task":"x"} {}`, `{"task":"x","maxCostUsd":"free"}`, `[]`} {
		if _, err := ParseJob([]byte(bad), func(string) string { return "" }); err == nil {
			t.Errorf("ParseJob(%s) accepted", bad)
		}
	}
}

// fakePi writes a script that records its argv (in argvFile), its stdin
// (argvFile+".stdin") and environment, prints events from a recorded file,
// then behaves as told ("exit" or "hang").
func fakePi(t *testing.T, events, then string) (cmd []string, argvFile string) {
	t.Helper()
	dir := t.TempDir()
	argvFile = filepath.Join(dir, "argv")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + argvFile + "\n" +
		"cat > " + argvFile + ".stdin\n" +
		"cat \"$PI_CODING_AGENT_DIR/models.json\" > " + argvFile + ".models 2>/dev/null\n" +
		"echo \"pi says the key is $ANTHROPIC_API_KEY\" >&2\n"
	if events != "" {
		abs := events
		if !filepath.IsAbs(abs) {
			abs, _ = filepath.Abs(filepath.Join("testdata", events))
		}
		// Like pi, pause after each turn (a real one calls the model next).
		script += "while IFS= read -r line; do printf '%s\\n' \"$line\"; case \"$line\" in *'\"type\":\"turn_end\"'*) sleep 0.3;; esac; done < " + abs + "\n"
	}
	if then == "hang" {
		script += "exec sleep 60\n"
	}
	p := filepath.Join(dir, "pi")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{p}, argvFile
}

type runResult struct {
	code   int
	line   ExitLine
	stdout string
	stderr string
}

func runMain(t *testing.T, job string, pi []string, env map[string]string, o Options) runResult {
	t.Helper()
	return runMainIn(t, t.TempDir(), job, pi, env, o)
}

// runMainIn runs Main with the job folder dir, where a test may have put a
// prompt.md.
func runMainIn(t *testing.T, dir, job string, pi []string, env map[string]string, o Options) runResult {
	t.Helper()
	o.JobFile = filepath.Join(dir, "job.json")
	if err := os.WriteFile(o.JobFile, []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	o.Workspace = t.TempDir()
	if o.ModelSocket == "" {
		o.ModelSocket = filepath.Join(dir, "no.sock")
	}
	o.Pi = pi
	o.Getenv = func(k string) string { return env[k] }
	o.Environ = func() []string {
		var out []string
		for k, v := range env {
			out = append(out, k+"="+v)
		}
		return append(out, "PATH="+os.Getenv("PATH"))
	}
	var stdout, stderr bytes.Buffer
	o.Stdout, o.Stderr = &stdout, &stderr
	code := Main(context.Background(), o)
	var r runResult
	r.code, r.stdout, r.stderr = code, stdout.String(), stderr.String()
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r.line); err != nil || r.line.Event != "exit" {
		t.Fatalf("last stdout line is not the exit line: %q (%v)", r.stdout, err)
	}
	return r
}

const secret = "sk-ant-test-0123456789abcdef"

func TestMainStopsAtMaxTurns(t *testing.T) {
	pi, _ := fakePi(t, "pi-loop.jsonl", "hang")
	start := time.Now()
	r := runMain(t, `{"jobId":"j","task":"loop","maxTurns":3}`, pi, map[string]string{"ANTHROPIC_API_KEY": secret}, Options{StopGrace: 2 * time.Second})
	if r.code != ExitPolicy || r.line.Outcome != OutcomePolicy || r.line.Reason != ReasonMaxTurns || r.line.Turns != 3 {
		t.Fatalf("code %d, line %+v\n%s", r.code, r.line, r.stderr)
	}
	if d := time.Since(start); d > 30*time.Second { // pi hangs forever unless stopped
		t.Fatalf("stopping took %v: pi was not stopped at the limit", d)
	}
	if r.line.MaxTurns != 3 || r.line.Tokens.Total == 0 {
		t.Fatalf("line %+v", r.line)
	}
}

func TestMainStopsAtCostLimit(t *testing.T) {
	pi, _ := fakePi(t, "pi-loop.jsonl", "hang")
	// Each looping turn costs 10 input + 5 output tokens of haiku: $0.000035.
	r := runMain(t, `{"jobId":"j","task":"loop","maxTurns":50,"maxCostUsd":"0.0001"}`, pi, nil, Options{StopGrace: 2 * time.Second})
	if r.code != ExitPolicy || r.line.Reason != ReasonCostLimit || r.line.Turns != 3 {
		t.Fatalf("code %d, line %+v\n%s", r.code, r.line, r.stderr)
	}
}

func TestMainCompletesAndNeverShowsASecret(t *testing.T) {
	pi, argvFile := fakePi(t, "pi-hello.jsonl", "exit")
	r := runMain(t, `{"jobId":"j","task":"write hello","model":"claude-haiku-4-5"}`, pi, map[string]string{"ANTHROPIC_API_KEY": secret}, Options{})
	if r.code != ExitCompleted || r.line.Outcome != OutcomeCompleted || r.line.Turns != 2 || r.line.Tokens.Total != 4452 || r.line.Model != "claude-haiku-4-5" {
		t.Fatalf("code %d, line %+v\n%s", r.code, r.line, r.stderr)
	}
	argv, _ := os.ReadFile(argvFile)
	for what, s := range map[string]string{"stdout": r.stdout, "stderr": r.stderr, "argv": string(argv)} {
		if strings.Contains(s, secret) {
			t.Errorf("the key appears in %s", what)
		}
	}
	if !strings.Contains(r.stderr, "pi says the key is [redacted]") {
		t.Errorf("pi's stderr not passed on redacted:\n%s", r.stderr)
	}
	if !strings.HasPrefix(r.stdout, "\n") && !strings.HasPrefix(r.stdout, "{") {
		t.Errorf("stdout carries more than the exit line: %q", r.stdout)
	}
}

// pi lingering after agent_settled (a child holding its output open) is
// stopped after the settle grace, and the run ends as it settled.
func TestMainStopsAPiThatLingersAfterSettling(t *testing.T) {
	pi, _ := fakePi(t, "pi-hello.jsonl", "hang")
	start := time.Now()
	r := runMain(t, `{"jobId":"j","task":"write hello"}`, pi, nil, Options{SettleGrace: 300 * time.Millisecond, StopGrace: time.Second})
	if r.code != ExitCompleted || r.line.Outcome != OutcomeCompleted || r.line.Turns != 2 || r.line.Tokens.Total != 4452 {
		t.Fatalf("code %d, line %+v\n%s", r.code, r.line, r.stderr)
	}
	if d := time.Since(start); d > 30*time.Second { // pi hangs forever unless stopped
		t.Fatalf("took %v: pi was not stopped after settling", d)
	}
	if !strings.Contains(r.stderr, "after its run settled: stopping it") {
		t.Errorf("transcript does not say why pi was stopped:\n%s", r.stderr)
	}
}

// A pi that exits 0 without agent_settled did not finish its run (pi 1.x
// settles every run it finishes): infrastructure, retried.
func TestMainRefusesAnUnsettledRun(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "pi-hello.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, l := range strings.SplitAfter(string(data), "\n") {
		if !strings.Contains(l, `"type":"agent_settled"`) {
			kept = append(kept, l)
		}
	}
	events := filepath.Join(t.TempDir(), "unsettled.jsonl")
	if err := os.WriteFile(events, []byte(strings.Join(kept, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	pi, _ := fakePi(t, events, "exit")
	r := runMain(t, `{"jobId":"j","task":"write hello"}`, pi, nil, Options{})
	if r.code != ExitInfra || r.line.Reason != ReasonAgentCrashed || r.line.Tokens.Total != 4452 {
		t.Fatalf("code %d, line %+v\n%s", r.code, r.line, r.stderr)
	}
	if !strings.Contains(r.stderr, "pi ended before its run settled") {
		t.Errorf("no clear reason:\n%s", r.stderr)
	}
}

func TestMainRefusesMalformedJob(t *testing.T) {
	pi, argvFile := fakePi(t, "", "exit")
	r := runMain(t, `{"task": "unterminated`, pi, nil, Options{})
	if r.code != ExitPolicy || r.line.Reason != ReasonInvalidJob {
		t.Fatalf("code %d, line %+v", r.code, r.line)
	}
	if !strings.Contains(r.stderr, "not a JSON job description") {
		t.Fatalf("stderr gives no clear reason:\n%s", r.stderr)
	}
	if _, err := os.Stat(argvFile); err == nil {
		t.Fatal("pi was started for a malformed job")
	}
}

func TestMainReportsACrashedAgent(t *testing.T) {
	r := runMain(t, `{"task":"x"}`, []string{"/nonexistent/pi"}, nil, Options{})
	if r.code != ExitInfra || r.line.Reason != ReasonAgentCrashed {
		t.Fatalf("code %d, line %+v", r.code, r.line)
	}
	pi, _ := fakePi(t, "", "exit") // exits 0 having asked nothing
	if r := runMain(t, `{"task":"x"}`, pi, nil, Options{}); r.code != ExitInfra || r.line.Reason != ReasonAgentCrashed {
		t.Fatalf("silent pi: code %d, line %+v", r.code, r.line)
	}
}

func TestMainStopsOnContextEnd(t *testing.T) {
	pi, _ := fakePi(t, "pi-loop.jsonl", "hang")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	dir := t.TempDir()
	job := filepath.Join(dir, "job.json")
	_ = os.WriteFile(job, []byte(`{"task":"x","maxTurns":100}`), 0o644)
	var out bytes.Buffer
	code := Main(ctx, Options{JobFile: job, Workspace: dir, ModelSocket: filepath.Join(dir, "x"), Pi: pi, Stdout: &out, StopGrace: time.Second})
	if code != ExitInfra || !strings.Contains(out.String(), `"reason":"terminated"`) {
		t.Fatalf("code %d, %s", code, out.String())
	}
}

func TestModelSocketIsForwardedOnLoopback(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "model.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	fp := fakeprovider.Start(ln, fakeprovider.Answer("hi", fakeprovider.Usage{Input: 1, Output: 1}))
	defer fp.Close()

	// Main writes models.json pointing the provider at the forwarder, under
	// the provider's own path (the gateway reads the provider from it), and
	// gives pi a placeholder key.
	pi, argvFile := fakePi(t, "pi-hello.jsonl", "exit")
	r := runMain(t, `{"task":"x"}`, pi, nil, Options{ModelSocket: sock})
	models, _ := os.ReadFile(argvFile + ".models")
	var m struct {
		Providers map[string]struct {
			BaseURL string `json:"baseUrl"`
		} `json:"providers"`
	}
	if err := json.Unmarshal(models, &m); err != nil || !strings.HasPrefix(m.Providers["anthropic"].BaseURL, "http://127.0.0.1:") ||
		!strings.HasSuffix(m.Providers["anthropic"].BaseURL, "/anthropic") {
		t.Fatalf("models.json = %s (%v)", models, err)
	}
	if !strings.Contains(r.stderr, "pi says the key is "+PlaceholderKey) {
		t.Fatalf("no placeholder key:\n%s", r.stderr)
	}

	f, err := startForwarder(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	resp, err := http.Post("http://"+f.Addr()+"/v1/messages", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "event: message_stop") {
		t.Fatalf("forwarded answer: %s", body)
	}
	if n := len(fp.Requests()); n != 1 {
		t.Fatalf("provider saw %d requests", n)
	}
}

func TestTranscriptIsBounded(t *testing.T) {
	var out bytes.Buffer
	tr := newTranscript(&out, 100, []string{"hunter2-secret"})
	for range 50 {
		io.WriteString(tr, "a line that says hunter2-secret\n")
	}
	io.WriteString(tr, "[run completed: completed]\n")
	s := out.String()
	if strings.Contains(s, "hunter2-secret") || strings.Count(s, "[transcript truncated]") != 1 || !strings.HasSuffix(s, "[run completed: completed]\n") || len(s) > 200 {
		t.Fatalf("transcript:\n%s", s)
	}
}
