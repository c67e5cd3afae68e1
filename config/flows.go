package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pidispatch/pidispatch/agent/flows"
	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/jobs"
)

// The settings of what the agent is asked (docs/flows.md): the operator's
// flows and how much of a forge thread a job's event carries.

// flowsEnvVars are the variables of this file, in EnvVars order.
var flowsEnvVars = []string{
	"PI_FLOWS_DIR",
	"PI_EVENT_MAX_COMMENTS",
}

func init() {
	// After the policy files, the files they sit beside.
	i := slices.Index(EnvVars, "PI_PAUSE_WINDOWS_FILE") + 1
	EnvVars = append(EnvVars[:i:i], append(append([]string(nil), flowsEnvVars...), EnvVars[i:]...)...)
}

// MaxFlowFiles bounds the flows of PI_FLOWS_DIR: every one is parsed at
// boot and kept in memory.
const MaxFlowFiles = 256

// DefaultEventMaxComments is PI_EVENT_MAX_COMMENTS's default.
const DefaultEventMaxComments = jobs.DefaultEventComments

// readFlows reads the variables of this file.
func (r *envReader) readFlows(c *Config) {
	r.envText("PI_FLOWS_DIR", &c.FlowsDir)
	r.envInt("PI_EVENT_MAX_COMMENTS", &c.EventMaxComments)
}

// flowProblems checks the settings of this file. The folder is not read
// here: Flows reads it, where a file that does not parse is reported.
func (c Config) flowProblems(p *problemList) {
	if c.FlowsDir != "" {
		if rule := check.AbsClean(c.FlowsDir); rule != "" {
			p.add("PI_FLOWS_DIR", c.FlowsDir, rule)
		}
	}
	p.intRange("PI_EVENT_MAX_COMMENTS", c.EventMaxComments, 0, jobs.MaxEventComments)
}

// Flows is the catalog of flows this host runs: the built-ins plus the
// operator's (PI_FLOWS_DIR). A folder that cannot be read, or a flow file
// that does not parse, is a *ConfigError naming PI_FLOWS_DIR, the file and
// the rule, so the worker refuses to boot rather than refuse every job of
// that flow later.
func (c Config) Flows() (flows.Catalog, error) {
	cat, err := LoadFlows(c.FlowsDir)
	if err != nil {
		return flows.Catalog{}, &ConfigError{Var: "PI_FLOWS_DIR", Value: c.FlowsDir, Rule: err.Error()}
	}
	return cat, nil
}

// LoadFlows is the built-in flows plus every <name>.md of dir, each parsed
// by flows.Parse, a file's flow overriding the built-in of its name. dir ""
// is the built-ins only. Other files, and names starting with a dot (as an
// editor's lock and backup files do), are ignored. A link is followed, but
// must lead to a regular file inside dir: the folder is the one place an
// operator reviews. At most MaxFlowFiles flows; each error names the file
// and the rule it broke.
func LoadFlows(dir string) (flows.Catalog, error) {
	if dir == "" {
		return flows.Builtin(), nil
	}
	if rule := check.AbsClean(dir); rule != "" {
		return flows.Catalog{}, fmt.Errorf("%s: %s", dir, rule)
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return flows.Catalog{}, fmt.Errorf("%s: %w", dir, unwrapPath(err))
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return flows.Catalog{}, fmt.Errorf("%s: must be a folder this user can read (%w)", dir, unwrapPath(err))
	}
	var extra []flows.Flow
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".md")
		if !ok || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if len(extra) == MaxFlowFiles {
			return flows.Catalog{}, fmt.Errorf("%s: holds more than %d flow files (*.md)", dir, MaxFlowFiles)
		}
		file := filepath.Join(dir, e.Name())
		data, err := readFlowFile(root, filepath.Join(root, e.Name()))
		if err != nil {
			return flows.Catalog{}, fmt.Errorf("%s: %w", file, err)
		}
		f, err := flows.Parse(name, data)
		if err != nil {
			return flows.Catalog{}, fmt.Errorf("%s: %w", file, err)
		}
		extra = append(extra, f)
	}
	return flows.Builtin().With(extra...), nil
}

// readFlowFile reads one flow file of the folder root (links resolved),
// bounded: it must be, or link to, a regular file inside root.
func readFlowFile(root, path string) ([]byte, error) {
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, unwrapPath(err)
	}
	if rel, err := filepath.Rel(root, target); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("links to %s, outside the folder: a flow must stay inside PI_FLOWS_DIR", target)
	}
	f, err := os.Open(target)
	if err != nil {
		return nil, unwrapPath(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, unwrapPath(err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("must be a regular file (%s)", fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, flows.MaxTemplateBytes+1))
	if err != nil {
		return nil, unwrapPath(err)
	}
	return data, nil
}

// unwrapPath drops the path an *os.PathError repeats, since every message
// here names its file already.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
