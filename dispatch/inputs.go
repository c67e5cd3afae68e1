package dispatch

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"

	"github.com/pidispatch/pidispatch/agent/flows"
	"github.com/pidispatch/pidispatch/dispatch/internal/jobout"
	"github.com/pidispatch/pidispatch/internal/hostfolder"
	"github.com/pidispatch/pidispatch/jobs"
)

// Files the Worker writes into the job's folder (/job) beside job.json.
const (
	// EventFile is a forge job's event (jobs.Event), read from the forge.
	EventFile = "event.json"
	// PromptFile is the prompt a flow job is given, rendered by the host.
	PromptFile = "prompt.md"
	// PullRequestFile is what the job may write in /job/out for its pull
	// request: the title on the first line, then the body.
	PullRequestFile = "pr.md"
)

// writeInputs writes what the job is given beside job.json, in order: its
// event (a forge job's, read from the forge when its workspace was
// prepared), its prompt (a flow job's, rendered from the flow's template,
// the host trigger's instructions and the task or the event) and its empty
// output folder, handed to the container's user. The record keeps the
// prompt's digest.
func (w *Worker) writeInputs(h *held, jobDir, user string) error {
	var ev *jobs.Event
	if h.ws != nil {
		ev = h.ws.Event()
	}
	if ev != nil {
		if err := writeJSON(filepath.Join(jobDir, EventFile), ev); err != nil {
			return err
		}
	}
	if err := w.writePrompt(h, jobDir, ev); err != nil {
		return err
	}
	out, err := jobout.Make(jobDir)
	if err != nil {
		return err
	}
	h.outDir = out
	return hostfolder.HandOver(out, user)
}

// writePrompt renders a flow job's prompt into the job's folder. A command
// job is given none: its command is the workspace's own prompt template.
func (w *Worker) writePrompt(h *held, jobDir string, ev *jobs.Event) error {
	flow, ok := w.flows.Lookup(h.spec.Flow)
	if !ok {
		return nil
	}
	in := flows.Input{Flow: flow, Task: h.spec.Task, Event: ev, Nonce: flows.NewNonce()}
	if ev != nil {
		in.Instructions = ev.Trigger.Instructions // the host's trigger's, never the job data's
	}
	prompt, err := flows.Render(in)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(jobDir, PromptFile), []byte(prompt), 0o644); err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(prompt))
	h.rec.PromptDigest = hex.EncodeToString(sum[:8])
	return nil
}

// withFlowTools is the job as job.json describes it: the tools its flow
// excludes join the ones the job excludes.
func (w *Worker) withFlowTools(j jobs.Job) jobs.Job {
	flow, ok := w.flows.Lookup(j.Flow)
	if !ok || len(flow.ExcludeTools) == 0 {
		return j
	}
	tools := slices.Clone(j.ExcludeTools)
	for _, t := range flow.ExcludeTools {
		if !slices.Contains(tools, t) {
			tools = append(tools, t)
		}
	}
	j.ExcludeTools = tools
	return j
}

// pullRequestText reads the title and body the job wrote for its pull
// request. A file the host refuses (not a regular file, too large, a control
// character, no title) is logged and left out as a whole: the pull request
// is then titled from its request.
//
// A pr.md refused is also answered as an output result (else nil), so the
// record and the status comment say why the pull request has the host's
// title.
func (w *Worker) pullRequestText(h *held) (*jobs.PullRequestText, *jobs.OutputResult) {
	if h.outDir == "" {
		return nil, nil
	}
	data, err := jobout.Read(h.outDir, PullRequestFile, jobs.MaxPullRequestBytes)
	if errors.Is(err, jobout.ErrAbsent) {
		return nil, nil
	}
	if err == nil {
		var pr jobs.PullRequestText
		if pr, err = jobs.ParsePullRequestText(data); err == nil {
			return &pr, nil
		}
	}
	h.log.Warn("job_output_refused", "file", PullRequestFile, "reason", err.Error())
	return nil, &jobs.OutputResult{File: PullRequestFile, Status: jobs.OutputRefused, Reason: err.Error()}
}

// readOutputs reads the other files the job wrote to /job/out for its forge
// (comment.md, review.json, labels.json), each from a regular file and
// bounded; one the host cannot read is refused here, with the reason. The
// workspace validates the rest against its forge before posting any.
func (w *Worker) readOutputs(h *held) (map[string][]byte, []jobs.OutputResult) {
	if h.outDir == "" {
		return nil, nil
	}
	out := map[string][]byte{}
	var refused []jobs.OutputResult
	for _, name := range jobs.Outputs {
		if name == jobs.OutputPullRequest {
			continue // the Worker validates pr.md itself (pullRequestText)
		}
		data, err := jobout.Read(h.outDir, name, jobs.MaxOutputBytes)
		switch {
		case errors.Is(err, jobout.ErrAbsent):
		case err != nil:
			h.log.Warn("job_output_refused", "file", name, "reason", err.Error())
			refused = append(refused, jobs.OutputResult{File: name, Status: jobs.OutputRefused, Reason: err.Error()})
		default:
			out[name] = data
		}
	}
	return out, refused
}

// changesNothing reports whether the job's flow cannot change code: one
// that excludes both the edit and the write tools (answer, plan) publishes
// its outputs and nothing else.
func (w *Worker) changesNothing(h *held) bool {
	flow, ok := w.flows.Lookup(h.spec.Flow)
	return ok && slices.Contains(flow.ExcludeTools, "edit") && slices.Contains(flow.ExcludeTools, "write")
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
