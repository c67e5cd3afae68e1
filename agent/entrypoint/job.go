package entrypoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
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
	// HostPrompt is the prompt the host rendered for a flow job
	// (/job/prompt.md), set by LoadJob; empty when the host wrote none.
	HostPrompt string `json:"-"`
	// PromptFrom says where Prompt comes from, for the transcript:
	// the prompt file's path, "the command and the task" or "the task".
	PromptFrom string `json:"-"`
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

// ErrBadJob marks a job (job.json, or the prompt.md beside it) the
// entrypoint cannot run: the run ends as policy (exit 2) with a reason,
// never retried.
var ErrBadJob = errors.New("the job cannot be run")

// MaxPromptBytes bounds /job/prompt.md. The host renders prompts of a few
// hundred KiB at most; a larger file is a fault on the host, refused
// rather than sent to the model (and billed) whole.
const MaxPromptBytes = 1 << 20

// LoadJob reads the job file and, for a flow job, the prompt the host
// rendered into promptFile beside it, which replaces the task as what pi is
// asked. A command job names a prompt template of the workspace, so it keeps
// its /name and task, and its prompt file is not read. A job that leaves
// nothing to ask is refused, as is a prompt file that cannot be trusted to
// be the host's text (see readPrompt). The error names the file at fault.
func LoadJob(jobFile, promptFile string, getenv func(string) string) (Job, error) {
	data, err := readJob(jobFile)
	if err != nil {
		return Job{}, fmt.Errorf("%s: %w", jobFile, err)
	}
	j, err := ParseJob(data, getenv)
	if err != nil {
		return Job{}, fmt.Errorf("%s: %w", jobFile, err)
	}
	j.PromptFrom = "the task"
	if j.Command != "" {
		j.PromptFrom = "the command and the task"
	} else {
		prompt, found, err := readPrompt(promptFile)
		if err != nil {
			return Job{}, fmt.Errorf("%s: %w", promptFile, err)
		}
		if found {
			j.HostPrompt, j.PromptFrom = prompt, promptFile
		}
	}
	if strings.TrimSpace(j.Prompt()) == "" {
		return Job{}, fmt.Errorf("%s: %w: no task, no command and no prompt: nothing to ask the agent", jobFile, ErrBadJob)
	}
	return j, nil
}

// ParseJob reads a job description and fills the run's defaults from env
// (PI_AGENT_PROVIDER, PI_AGENT_MODEL, PI_AGENT_MAX_TURNS, PI_AGENT_THINKING).
// Whether the job leaves anything to ask depends on the prompt file too:
// LoadJob checks that.
func ParseJob(data []byte, getenv func(string) string) (Job, error) {
	var j Job
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&j); err != nil {
		return Job{}, fmt.Errorf("%w: not a JSON job description: %v", ErrBadJob, err)
	}
	if dec.More() {
		return Job{}, fmt.Errorf("%w: more than one JSON value", ErrBadJob)
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

// Prompt is the message pi starts with: a prompt-template command (/name)
// followed by the task; else the prompt the host rendered; else the task.
func (j Job) Prompt() string {
	switch {
	case j.Command != "":
		return strings.TrimSpace("/" + strings.TrimPrefix(j.Command, "/") + " " + j.Task)
	case j.HostPrompt != "":
		return j.HostPrompt
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
// allowlist, and the session: none without the host's session folder, else
// a new one kept there, or the last one continued when the job resumes. The prompt is not on
// it: pi reads it from its standard input (see runPi), since one argument
// is limited to 128 KiB on Linux and a rendered prompt may be larger. It
// never carries a secret: keys reach pi through its environment.
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
	switch {
	case sessionDir == "":
		return append(args, "--no-session")
	case j.Resume:
		return append(args, "--continue", "--session-dir", sessionDir)
	}
	return append(args, "--session-dir", sessionDir) // a new session, for the thread's next job

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

// readPrompt reads the host's rendered prompt, found reporting whether the
// file exists. The file is opened through its folder as an os.Root, so a
// symbolic link is followed only to a relative target inside that folder
// (/job): the job folder is the host's, and a link out of it would make
// another file the prompt. It is refused, as a bad job, unless it is a
// regular file of at most MaxPromptBytes of valid UTF-8 with some text in
// it: anything else is not a prompt the host rendered.
func readPrompt(path string) (prompt string, found bool, err error) {
	root, err := os.OpenRoot(filepath.Dir(path))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("%w: %v", ErrBadJob, err)
	}
	defer root.Close()
	name := filepath.Base(path)
	if _, err := root.Lstat(name); errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	data, err := readRegular(root, name)
	if err != nil {
		return "", true, fmt.Errorf("%w: %v", ErrBadJob, err)
	}
	if !utf8.Valid(data) {
		return "", true, fmt.Errorf("%w: the prompt is not valid UTF-8", ErrBadJob)
	}
	if strings.TrimSpace(string(data)) == "" {
		return "", true, fmt.Errorf("%w: the prompt is empty", ErrBadJob)
	}
	return string(data), true, nil
}

// readRegular reads name in root when it is a regular file of at most
// MaxPromptBytes. It looks before it opens, since opening a FIFO would
// block, and checks the open file again, since the look and the open are
// two steps.
func readRegular(root *os.Root, name string) ([]byte, error) {
	fi, err := root.Stat(name)
	if err != nil {
		return nil, err
	}
	if err := checkPromptFile(fi); err != nil {
		return nil, err
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := checkPromptFile(fi); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxPromptBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxPromptBytes {
		return nil, fmt.Errorf("the prompt is larger than %d bytes", MaxPromptBytes)
	}
	return data, nil
}

// checkPromptFile refuses what cannot be the host's prompt file.
func checkPromptFile(fi fs.FileInfo) error {
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("the prompt is not a regular file (%s)", fi.Mode().Type())
	case fi.Size() > MaxPromptBytes:
		return fmt.Errorf("the prompt is larger than %d bytes", MaxPromptBytes)
	}
	return nil
}
