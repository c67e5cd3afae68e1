package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/agent/flows"
	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/internal/image/agentimage"
	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/runner"
	wiring "github.com/pidispatch/pidispatch/stack"
)

// These tests follow a forge event from the forge to the model: the event
// is turned into a job as the receiver turns it (the forge's payload parsed
// with forge.ParseGitHub, ParseGitLab or ParseForgejo, matched against the
// triggers file, forge.Delivery, the Router), a live worker wired as run
// wires it (stack.LoadForgePolicies, stack.ForgeWorkspacesFromEnv,
// WithForgeWorkspaces, WithForgePolicies) reads the event from the forge,
// writes /job/event.json and /job/prompt.md, and the real agent image sends
// the prompt to the fake provider. What is asserted is what the model
// received.

// promptTrigger is one forge trigger of a rig's triggers file.
type promptTrigger struct {
	On           map[string]any
	Flow         string
	Instructions string
	Publish      map[string]any
}

// forgeTriggersFile writes the triggers file of kind's triggers: each runs
// its flow with the secrets profile "agent" and its own instructions.
func forgeTriggersFile(t *testing.T, kind string, triggers []promptTrigger) string {
	t.Helper()
	var list []map[string]any
	for _, tr := range triggers {
		e := map[string]any{"on": tr.On, "run": map[string]any{"kind": kind, "flow": tr.Flow, "secretsProfile": "agent",
			"instructions": tr.Instructions}}
		if tr.Publish != nil {
			e["publish"] = tr.Publish
		}
		list = append(list, e)
	}
	data, err := json.MarshalIndent(map[string]any{"triggers": list}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "triggers.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// jobSight is what a job's folder held while its agent waited for its
// first answer: the files the container was given.
type jobSight struct {
	event, prompt []byte
	err           string
}

// promptRig is one live worker that runs forge jobs of one forge in the
// real agent image, whose model is the fake provider, and the receiver's
// path from a forge event to a queued job.
type promptRig struct {
	w        *bootedWorker
	wlog     *logtest.Buffer
	fp       *fakeprovider.Server
	dc       *client.Client
	router   *enqueue.Router
	triggers []cronsync.ForgeTrigger

	mu      sync.Mutex
	current string // the job whose container the provider's hook looks into
	sights  map[string]jobSight
}

// bootPromptRig starts the fake provider, whose every answer respond
// computes from the request (nil: a final answer), and a worker wired as run
// wires it from env (the forge's credentials) and the triggers file.
func bootPromptRig(t *testing.T, db *livetest.ValkeyDB, prefix, triggersFile string, env map[string]string, respond func([]byte) fakeprovider.Step) *promptRig {
	t.Helper()
	ensureAgentImage(t)
	r := &promptRig{dc: livetest.Docker(t), sights: map[string]jobSight{}}
	if respond == nil {
		respond = func([]byte) fakeprovider.Step {
			return fakeprovider.Answer("Read the request; nothing to change.", fakeprovider.Usage{Input: 900, Output: 12})
		}
	}
	fp, err := fakeprovider.Listen(fakeprovider.Step{Before: r.look, Respond: respond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fp.Close() })
	r.fp = fp
	resolver := filepath.Join(t.TempDir(), "resolve-agent")
	script := "#!/bin/sh\necho ANTHROPIC_API_KEY=sk-ant-prompt-" + randomHex(8) + "\necho PI_AGENT_MODEL=claude-haiku-4-5\necho PI_AGENT_RETRIES=0\n"
	if err := os.WriteFile(resolver, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	name := uniqueName(prefix, db)
	vars := map[string]string{
		"PI_WORKER_NAME": name, "PI_JOB_IMAGE": agentimage.Tag, "PI_MODEL_UPSTREAM": fp.URL(),
		"PI_SECRET_PROFILES": "agent:" + resolver, "PI_JOB_MEMORY": "1g", "PI_JOB_CPUS": "1",
		"PI_CONTAINER_USER": "65534:65534", "PI_TRIGGERS_FILE": triggersFile,
	}
	for k, v := range env {
		vars[k] = v
	}
	getenv := testEnv(t, db.URL, vars)
	r.wlog = &logtest.Buffer{}
	policies, err := wiring.LoadForgePolicies(triggersFile, name, r.wlog.Logger())
	if err != nil {
		t.Fatal(err)
	}
	ws, err := wiring.ForgeWorkspacesFromEnv(getenv, name, r.wlog.Logger(), policies)
	if err != nil || ws == nil {
		t.Fatalf("forge workspaces: %v, %v", ws, err)
	}
	r.w = bootWorker(t, getenv, dispatch.Tuning{}, wiring.WithForgeWorkspaces(ws), wiring.WithForgePolicies(policies))
	data, err := os.ReadFile(triggersFile)
	if err != nil {
		t.Fatal(err)
	}
	if r.triggers, err = cronsync.ParseForgeTriggers(data); err != nil {
		t.Fatal(err)
	}
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: "receiver-" + name, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	r.router = enqueue.NewRouter(p, enqueue.RouterConfig{})
	return r
}

// look is the provider's hook before each answer: while the agent of the
// current job waits, it reads the job's event.json and prompt.md from the
// folder mounted at /job in its running container, once per job. It runs in
// the provider's goroutine, so it reports through the sight, never t.
func (r *promptRig) look() {
	r.mu.Lock()
	defer r.mu.Unlock()
	jobID := r.current
	if _, seen := r.sights[jobID]; seen || jobID == "" {
		return
	}
	r.sights[jobID] = r.sight(jobID)
}

func (r *promptRig) sight(jobID string) jobSight {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := r.dc.ContainerList(ctx, client.ContainerListOptions{Filters: make(client.Filters).Add("label", runner.LabelJob+"="+jobID)})
	if err != nil {
		return jobSight{err: err.Error()}
	}
	for _, c := range list.Items {
		if c.State != container.StateRunning {
			continue
		}
		res, err := r.dc.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
		if err != nil {
			return jobSight{err: err.Error()}
		}
		for _, m := range res.Container.Mounts {
			if m.Destination != "/job" {
				continue
			}
			var s jobSight
			var err1, err2 error
			s.event, err1 = os.ReadFile(filepath.Join(m.Source, dispatch.EventFile))
			s.prompt, err2 = os.ReadFile(filepath.Join(m.Source, dispatch.PromptFile))
			if err1 != nil || err2 != nil {
				s.err = strings.TrimSpace(errText(err1) + " " + errText(err2))
			}
			return s
		}
		return jobSight{err: "the running container has no /job mount"}
	}
	return jobSight{err: "no running container of " + jobID}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// promptRun is one job as the model saw it.
type promptRun struct {
	rec    jobs.Record
	text   string     // the first user message of the first model request
	prompt string     // /job/prompt.md as the container was given it
	event  jobs.Event // /job/event.json as the container was given it
	nonce  string
	blocks []untrustedBlock
	// requests are the job's model requests.
	requests []fakeprovider.Request
}

// run turns ev into its job as the receiver does (the first trigger the
// event fires, forge.Delivery), runs it on the rig's worker and returns what
// the model received, checking what every forge job's prompt must hold:
// event.json and prompt.md were in the container, the model was asked the
// prompt (pi trims it), and the record's promptDigest is its digest.
func (r *promptRig) run(t *testing.T, ev forge.Event, wantTrigger string) promptRun {
	t.Helper()
	trig, _, reason := forge.Match(r.triggers, ev)
	if reason != "" || trig.Name != wantTrigger {
		t.Fatalf("the event (%s %s) fired trigger %q (reason %q), want %q", ev.Kind, ev.Action, trig.Name, reason, wantTrigger)
	}
	d := forge.Delivery(trig, ev, 1)
	before := len(r.fp.Requests())
	r.mu.Lock()
	r.current = d.JobID
	r.mu.Unlock()
	if e, err := r.router.EnqueueForge(context.Background(), d); err != nil || !e.Added {
		t.Fatalf("enqueue %s: added %v, %v", d.JobID, e.Added, err)
	}
	rec := waitRecord(t, r.w.cfg.LogsDir, d.JobID, 3*time.Minute)
	reqs := r.fp.Requests()[before:]
	if rec.Outcome != jobs.OutcomeCompleted || len(reqs) == 0 {
		t.Fatalf("job %s: record %+v (telemetry %s), %d model requests; worker log:\n%s", d.JobID, rec, rec.Telemetry, len(reqs), r.w.logs.String())
	}
	r.mu.Lock()
	sight, ok := r.sights[d.JobID]
	r.mu.Unlock()
	if !ok || sight.err != "" {
		t.Fatalf("the job's folder was not read while its agent ran: %v %q", ok, sight.err)
	}
	run := promptRun{rec: rec, prompt: string(sight.prompt), requests: reqs, text: firstUserText(t, reqs[0].Body)}
	if err := json.Unmarshal(sight.event, &run.event); err != nil || run.event.Version != jobs.EventVersion {
		t.Fatalf("/job/event.json: %v (version %d): %.300s", err, run.event.Version, sight.event)
	}
	if run.event.Repository.FullName != ev.Repo || run.event.Trigger.Name != wantTrigger || run.event.Trigger.Instructions != trig.Job.Instructions {
		t.Fatalf("/job/event.json names repository %q, trigger %+v; want %q, %q", run.event.Repository.FullName, run.event.Trigger, ev.Repo, wantTrigger)
	}
	if run.text != strings.TrimSpace(run.prompt) {
		t.Fatalf("the model was not asked /job/prompt.md (%d bytes asked, %d in the file)\nasked: %.400s\nfile: %.400s", len(run.text), len(run.prompt), run.text, run.prompt)
	}
	sum := sha256.Sum256(sight.prompt)
	if want := hex.EncodeToString(sum[:])[:16]; rec.PromptDigest != want || !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(rec.PromptDigest) {
		t.Fatalf("record's promptDigest %q, want %q (the first 16 hex of the prompt's SHA-256)", rec.PromptDigest, want)
	}
	run.nonce, run.blocks = untrustedBlocks(t, run.text)
	return run
}

// firstUserText is the text of the first user message of an Anthropic
// messages request.
func firstUserText(t *testing.T, body []byte) string {
	t.Helper()
	text, err := userText(body)
	if err != nil {
		t.Fatalf("%v: %.300s", err, body)
	}
	return text
}

// anthropicRequest is what the tests read of a messages request.
type anthropicRequest struct {
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// userText is the text of the first user message of an Anthropic messages
// request: its content as a string, or its text blocks joined.
func userText(body []byte) (string, error) {
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return "", fmt.Errorf("the model request is not a messages request: %w", err)
	}
	for _, m := range req.Messages {
		if m.Role != "user" {
			continue
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			return s, nil
		}
		var parts []struct {
			Type, Text string
		}
		if err := json.Unmarshal(m.Content, &parts); err != nil {
			return "", fmt.Errorf("user message content: %w", err)
		}
		var b strings.Builder
		for _, p := range parts {
			if p.Type == "text" {
				b.WriteString(p.Text)
			}
		}
		return b.String(), nil
	}
	return "", errors.New("no user message in the model request")
}

// untrustedBlock is one fenced untrusted block of a prompt.
type untrustedBlock struct {
	fence, label, body string
	start, end         int // byte offsets of its opening fence and past its end marker
}

var openFenceRE = regexp.MustCompile("^(`{4,})" + flows.UntrustedOpen + "([0-9a-f]{16,128}) (.+)$")

// untrustedBlocks reads a prompt's untrusted blocks: each opens with a
// fence of four or more backticks whose info string is untrusted-<nonce>
// and a label, ends with the same fence alone on a line and the line
// end-untrusted-<nonce>. Every block carries the one nonce, which the
// preamble names; a block left open fails the test.
func untrustedBlocks(t *testing.T, prompt string) (string, []untrustedBlock) {
	t.Helper()
	lines := strings.SplitAfter(prompt, "\n")
	var nonce string
	var blocks []untrustedBlock
	off := 0
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSuffix(lines[i], "\n")
		m := openFenceRE.FindStringSubmatch(line)
		if m == nil {
			off += len(lines[i])
			continue
		}
		if nonce == "" {
			nonce = m[2]
		} else if m[2] != nonce {
			t.Fatalf("a block with another nonce %q (the job's is %q): %q", m[2], nonce, line)
		}
		b := untrustedBlock{fence: m[1], label: m[3], start: off}
		off += len(lines[i])
		var body []string
		closed := false
		for i++; i < len(lines); i++ {
			l := strings.TrimSuffix(lines[i], "\n")
			off += len(lines[i])
			if l == b.fence {
				closed = true
				break
			}
			body = append(body, l)
		}
		if !closed || i+1 >= len(lines) || strings.TrimSuffix(lines[i+1], "\n") != flows.UntrustedClose+nonce {
			t.Fatalf("block %q is not closed by its fence and end-untrusted-%s", b.label, nonce)
		}
		i++
		off += len(lines[i])
		b.body, b.end = strings.Join(body, "\n"), off
		blocks = append(blocks, b)
	}
	if nonce == "" {
		t.Fatalf("no untrusted block in the prompt:\n%.2000s", prompt)
	}
	if len(nonce) != 32 || !strings.Contains(prompt, "`"+flows.UntrustedOpen+nonce+"`") {
		t.Fatalf("nonce %q is not 32 hex digits named by the preamble", nonce)
	}
	return nonce, blocks
}

// eventPart is an event part the prompt must show in a block of its own: a
// block whose label matches and whose text is body.
type eventPart struct {
	label *regexp.Regexp
	body  string
}

func newEventPart(label, body string) eventPart { return eventPart{regexp.MustCompile(label), body} }

// find is the block that shows p.
func (run promptRun) find(t *testing.T, p eventPart) untrustedBlock {
	t.Helper()
	for _, b := range run.blocks {
		if p.label.MatchString(b.label) && b.body == p.body {
			return b
		}
	}
	var seen []string
	for _, b := range run.blocks {
		seen = append(seen, b.label+": "+shorten(b.body, 120))
	}
	t.Fatalf("no block labelled %s holding %q; blocks:\n%s", p.label, shorten(p.body, 200), strings.Join(seen, "\n"))
	return untrustedBlock{}
}

func shorten(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// checkOrder checks the first model request's order: the trigger's
// instructions under the operator's heading, then the flow's template under
// its heading, then the event's heading and its parts, each in its own
// fenced block, in the order given; and that nothing of the host's sits
// inside a block.
func (run promptRun) checkOrder(t *testing.T, instructions, flow string, parts ...eventPart) {
	t.Helper()
	f, ok := flows.Builtin().Lookup(flow)
	if !ok {
		t.Fatalf("no built-in flow %q", flow)
	}
	// A distinctive line of the flow's template: its first.
	line, _, _ := strings.Cut(strings.TrimSpace(f.Template), "\n")
	text := run.text
	at := []struct {
		what string
		pos  int
	}{
		{"the operator's heading", strings.Index(text, flows.HeadingInstructions+"\n")},
		{"the trigger's instructions", strings.Index(text, instructions)},
		{"the flow's heading", strings.Index(text, flows.HeadingFlow+flow+"\n")},
		{"the flow's template line " + line, strings.Index(text, "\n"+line+"\n")},
		{"the event's heading", strings.Index(text, flows.HeadingEvent+"\n")},
	}
	for _, p := range parts {
		b := run.find(t, p)
		at = append(at, struct {
			what string
			pos  int
		}{"the block " + b.label, b.start})
	}
	for i, a := range at {
		if a.pos < 0 {
			t.Fatalf("%s is not in the first model request:\n%.3000s", a.what, text)
		}
		if i > 0 && a.pos <= at[i-1].pos {
			t.Fatalf("%s (at %d) is not after %s (at %d):\n%.3000s", a.what, a.pos, at[i-1].what, at[i-1].pos, text)
		}
	}
	if host := run.outside(); strings.Count(host, instructions) != 1 || strings.Count(host, flows.HeadingFlow) != 1 ||
		strings.Count(host, flows.HeadingEvent) != 1 {
		t.Fatalf("the host's instructions, flow heading or event heading are not shown once each outside the blocks")
	}
	for _, b := range run.blocks {
		if strings.Contains(b.body, instructions) {
			t.Fatalf("the operator's instructions are inside the untrusted block %q", b.label)
		}
	}
}

// outside is the prompt with every untrusted block taken out: the host's
// own words.
func (run promptRun) outside() string {
	var b strings.Builder
	last := 0
	for _, blk := range run.blocks {
		b.WriteString(run.text[last:blk.start])
		last = blk.end
	}
	b.WriteString(run.text[last:])
	return b.String()
}

// checkClean fails when s holds a control character other than newline and
// tab, or an invisible format character.
func checkClean(t *testing.T, what, s string) {
	t.Helper()
	for i, c := range s {
		if c != '\n' && c != '\t' && (unicode.IsControl(c) || unicode.Is(unicode.Cf, c) || c == '\u2028' || c == '\u2029') {
			t.Fatalf("%s holds %U at byte %d: %q", what, c, i, s[max(i-40, 0):min(i+40, len(s))])
		}
	}
}
