package entrypoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Job is the part of /job/job.json the entrypoint acts on. The worker has
// validated the whole document (jobs.ParseJob); fields the agent has no
// use for are ignored here.
type Job struct {
	JobID        string   `json:"jobId"`
	Attempt      int      `json:"attempt"`
	Flow         string   `json:"flow"`
	Command      string   `json:"command"`
	Task         string   `json:"task"`
	Resume       bool     `json:"resume"`
	Provider     string   `json:"provider"`
	Model        string   `json:"model"`
	MaxTurns     int      `json:"maxTurns"`
	MaxCostUSD   string   `json:"maxCostUsd"`
	ExcludeTools []string `json:"excludeTools"`
	// Thinking is not a job field today; PI_AGENT_THINKING sets it.
	Thinking string `json:"-"`
}

// Defaults of a run, each overridable by the image's environment.
const (
	DefaultProvider = "anthropic"
	DefaultModel    = "claude-sonnet-4-5"
	DefaultMaxTurns = 50
)

// BuiltinTools are pi's built-in tools; a job's excludeTools removes from
// this allowlist.
var BuiltinTools = []string{"read", "bash", "edit", "write", "grep", "find", "ls"}

var thinkingLevels = []string{"off", "minimal", "low", "medium", "high", "xhigh", "max"}

// ErrBadJob marks a job.json the entrypoint cannot run: the run ends as
// policy (exit 2) with a reason, never retried.
var ErrBadJob = errors.New("job.json cannot be run")

// ParseJob reads a job description and fills the run's defaults from env
// (PI_AGENT_PROVIDER, PI_AGENT_MODEL, PI_AGENT_MAX_TURNS, PI_AGENT_THINKING).
func ParseJob(data []byte, getenv func(string) string) (Job, error) {
	var j Job
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&j); err != nil {
		return Job{}, fmt.Errorf("%w: not a JSON job description: %v", ErrBadJob, err)
	}
	if dec.More() {
		return Job{}, fmt.Errorf("%w: more than one JSON value", ErrBadJob)
	}
	if strings.TrimSpace(j.Task) == "" && j.Command == "" {
		return Job{}, fmt.Errorf("%w: no task and no command: nothing to ask the agent", ErrBadJob)
	}
	j.Provider = firstOf(j.Provider, getenv("PI_AGENT_PROVIDER"), DefaultProvider)
	j.Model = firstOf(j.Model, getenv("PI_AGENT_MODEL"), DefaultModel)
	j.Thinking = getenv("PI_AGENT_THINKING")
	if j.Thinking != "" && !slices.Contains(thinkingLevels, j.Thinking) {
		return Job{}, fmt.Errorf("%w: PI_AGENT_THINKING must be one of %s", ErrBadJob, strings.Join(thinkingLevels, ", "))
	}
	if j.MaxTurns < 0 {
		return Job{}, fmt.Errorf("%w: maxTurns must be positive", ErrBadJob)
	}
	if j.MaxTurns == 0 {
		j.MaxTurns = DefaultMaxTurns
		if v := getenv("PI_AGENT_MAX_TURNS"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return Job{}, fmt.Errorf("%w: PI_AGENT_MAX_TURNS must be a whole number of at least 1", ErrBadJob)
			}
			j.MaxTurns = n
		}
	}
	if _, err := j.maxCost(); err != nil {
		return Job{}, err
	}
	return j, nil
}

// maxCost is the job's cost limit in USD; 0 means none.
func (j Job) maxCost() (float64, error) {
	if j.MaxCostUSD == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(j.MaxCostUSD, 64)
	if err != nil || f <= 0 {
		return 0, fmt.Errorf("%w: maxCostUsd must be a positive decimal", ErrBadJob)
	}
	return f, nil
}

// Prompt is the message pi starts with: the task, or a prompt-template
// command (/name) followed by the task.
func (j Job) Prompt() string {
	if j.Command != "" {
		return strings.TrimSpace("/" + strings.TrimPrefix(j.Command, "/") + " " + j.Task)
	}
	return j.Task
}

// Tools is the tool allowlist: the built-ins minus excludeTools.
func (j Job) Tools() []string {
	var out []string
	for _, t := range BuiltinTools {
		if !slices.Contains(j.ExcludeTools, t) {
			out = append(out, t)
		}
	}
	return out
}

// Args is pi's command line for the job: JSON mode, the provider and model,
// the workspace's own pi resources trusted (its prompt templates are what a
// command job names; the container, not pi, is the boundary), the tool
// allowlist, no session unless the job resumes, and the prompt. It never
// carries a secret: keys reach pi through its environment.
func (j Job) Args(sessionDir string) []string {
	args := []string{"--mode", "json", "--approve", "--provider", j.Provider, "--model", j.Model}
	if j.Thinking != "" {
		args = append(args, "--thinking", j.Thinking)
	}
	if tools := j.Tools(); len(tools) > 0 {
		args = append(args, "--tools", strings.Join(tools, ","))
	} else {
		args = append(args, "--no-tools")
	}
	if j.Resume {
		args = append(args, "--continue", "--session-dir", sessionDir)
	} else {
		args = append(args, "--no-session")
	}
	// pi reads a leading '-' as a flag and '@' as a file to attach; a space
	// keeps such a prompt a prompt.
	prompt := j.Prompt()
	if strings.HasPrefix(prompt, "-") || strings.HasPrefix(prompt, "@") {
		prompt = " " + prompt
	}
	return append(args, prompt)
}

func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// readJob reads the job file, bounded.
func readJob(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadJob, err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, 2<<20)); err != nil {
		return nil, fmt.Errorf("%w: read: %v", ErrBadJob, err)
	}
	return buf.Bytes(), nil
}
