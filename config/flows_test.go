package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/agent/flows"
	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/jobs"
)

func TestLoad_EventMaxComments(t *testing.T) {
	t.Parallel()
	c, err := config.Load(envOf(nil))
	require.NoError(t, err)
	require.Equal(t, jobs.DefaultEventComments, c.EventMaxComments)
	require.Equal(t, jobs.DefaultEventComments, config.Default().EventMaxComments)
	require.Empty(t, c.FlowsDir)

	for v, want := range map[string]int{"0": 0, "7": 7, "100": jobs.MaxEventComments} {
		c, err := config.Load(envOf(map[string]string{"PI_EVENT_MAX_COMMENTS": v}))
		require.NoError(t, err, v)
		require.Equal(t, want, c.EventMaxComments, v)
	}
	for v, rule := range map[string]string{
		"101": "must be between 0 and 100",
		"-1":  "must be a whole number written in plain digits",
		"07":  "must be a whole number written in plain digits",
		"2.5": "must be a whole number written in plain digits",
		" 5":  "must be a whole number written in plain digits",
	} {
		_, err := config.Load(envOf(map[string]string{"PI_EVENT_MAX_COMMENTS": v}))
		var ce *config.ConfigError
		require.ErrorAs(t, err, &ce, v)
		require.Equal(t, "PI_EVENT_MAX_COMMENTS", ce.Var)
		require.Equal(t, v, ce.Value, "the error repeats the value as typed")
		require.Equal(t, rule, ce.Rule, v)
	}
}

func TestLoad_FlowsDirMustBeAbsoluteAndClean(t *testing.T) {
	t.Parallel()
	c, err := config.Load(envOf(map[string]string{"PI_FLOWS_DIR": "/srv/pidispatch/flows"}))
	require.NoError(t, err, "Load checks the path; Flows reads the folder")
	require.Equal(t, "/srv/pidispatch/flows", c.FlowsDir)
	for v, rule := range map[string]string{"flows": "must be an absolute path", "/srv/../flows": "must be a clean path", "/srv/flows/": "must be a clean path"} {
		_, err := config.Load(envOf(map[string]string{"PI_FLOWS_DIR": v}))
		var ce *config.ConfigError
		require.ErrorAs(t, err, &ce, v)
		require.Equal(t, "PI_FLOWS_DIR", ce.Var)
		require.Contains(t, ce.Rule, rule)
	}
	bad := config.Default()
	bad.FlowsDir = "relative"
	var ce *config.ConfigError
	require.ErrorAs(t, bad.Validate(), &ce)
	require.Equal(t, "PI_FLOWS_DIR", ce.Var)
	bad = config.Default()
	bad.EventMaxComments = jobs.MaxEventComments + 1
	require.ErrorAs(t, bad.Validate(), &ce)
	require.Equal(t, "PI_EVENT_MAX_COMMENTS", ce.Var)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(data), 0o600))
}

// The operator's flows add to the built-ins and override them by name;
// files that are not *.md, and dot files, are ignored; links inside the
// folder are followed.
func TestLoadFlows_AddsAndOverrides(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "fix.md"), "---\nexcludeTools: bash\n---\nFix it our way.\n")
	writeFile(t, filepath.Join(dir, "triage.md"), "Label the request.\n")
	writeFile(t, filepath.Join(dir, "README.txt"), "not a flow")
	writeFile(t, filepath.Join(dir, ".#fix.md"), "an editor's lock file, not parsed: \x00")
	writeFile(t, filepath.Join(dir, "shared.txt"), "Shared text.")
	require.NoError(t, os.Symlink("shared.txt", filepath.Join(dir, "shared.md")))

	cat, err := config.LoadFlows(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"answer", "default", "fix", "plan", "review", "shared", "triage"}, cat.Names())
	fix, _ := cat.Lookup("fix")
	require.Equal(t, flows.Flow{Name: "fix", Template: "Fix it our way.", ExcludeTools: []string{"bash"}}, fix)
	shared, _ := cat.Lookup("shared")
	require.Equal(t, "Shared text.", shared.Template)

	// A folder reached through a link is the folder.
	link := filepath.Join(t.TempDir(), "flows")
	require.NoError(t, os.Symlink(dir, link))
	cat, err = config.LoadFlows(link)
	require.NoError(t, err)
	require.Len(t, cat.Names(), 7)

	cat, err = config.LoadFlows("")
	require.NoError(t, err)
	require.Equal(t, flows.Builtin().Names(), cat.Names())
}

// Every refusal names the file and the rule.
func TestLoadFlows_RefusesNamingFileAndRule(t *testing.T) {
	t.Parallel()
	outside := filepath.Join(t.TempDir(), "elsewhere.md")
	writeFile(t, outside, "Not reviewed here.")
	tests := []struct {
		name  string
		setup func(dir string)
		file  string
		rule  string
	}{
		{"unknown tool", func(d string) { writeFile(t, filepath.Join(d, "a.md"), "---\nexcludeTools: rm\n---\nx") }, "a.md", `flow "a": line 2: excludeTools: unknown tool "rm"`},
		{"unknown key", func(d string) { writeFile(t, filepath.Join(d, "a.md"), "---\nmodel: x\n---\nx") }, "a.md", `unknown front-matter key "model"`},
		{"bad name", func(d string) { writeFile(t, filepath.Join(d, "Fix.md"), "x") }, "Fix.md", "the name must match ^[a-z0-9][a-z0-9_-]{0,63}$"},
		{"empty", func(d string) { writeFile(t, filepath.Join(d, "a.md"), "\n") }, "a.md", "the template is empty"},
		{"too large", func(d string) { writeFile(t, filepath.Join(d, "a.md"), strings.Repeat("x", flows.MaxTemplateBytes+10)) }, "a.md", "larger than 16384 bytes"},
		{"link outside", func(d string) { require.NoError(t, os.Symlink(outside, filepath.Join(d, "a.md"))) }, "a.md", "outside the folder"},
		{"dangling link", func(d string) { require.NoError(t, os.Symlink("gone.txt", filepath.Join(d, "a.md"))) }, "a.md", "no such file"},
		{"folder", func(d string) { require.NoError(t, os.Mkdir(filepath.Join(d, "a.md"), 0o700)) }, "a.md", "must be a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			tt.setup(dir)
			_, err := config.LoadFlows(dir)
			require.Error(t, err)
			require.Contains(t, err.Error(), filepath.Join(dir, tt.file)+": ")
			require.Contains(t, err.Error(), tt.rule)
		})
	}
}

func TestLoadFlows_FolderRules(t *testing.T) {
	t.Parallel()
	_, err := config.LoadFlows(filepath.Join(t.TempDir(), "missing"))
	require.ErrorContains(t, err, "no such file or directory")
	_, err = config.LoadFlows("relative/flows")
	require.ErrorContains(t, err, "relative/flows: must be an absolute path")
	file := filepath.Join(t.TempDir(), "flows")
	writeFile(t, file, "x")
	_, err = config.LoadFlows(file)
	require.ErrorContains(t, err, file+": must be a folder this user can read")

	dir := t.TempDir()
	for i := range config.MaxFlowFiles + 1 {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("f%03d.md", i)), "x")
	}
	_, err = config.LoadFlows(dir)
	require.ErrorContains(t, err, dir+": holds more than 256 flow files")
	require.NoError(t, os.Remove(filepath.Join(dir, "f000.md")))
	cat, err := config.LoadFlows(dir)
	require.NoError(t, err, "256 flows are allowed")
	require.Len(t, cat.Names(), config.MaxFlowFiles+5)
}

// Config.Flows reports a bad folder as PI_FLOWS_DIR's error.
func TestConfig_FlowsNamesTheVariable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.md"), "---\nexcludeTools: powershell\n---\nx")
	c := config.Default()
	c.FlowsDir = dir
	_, err := c.Flows()
	var ce *config.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "PI_FLOWS_DIR", ce.Var)
	require.Equal(t, dir, ce.Value)
	require.Contains(t, ce.Rule, filepath.Join(dir, "a.md")+`: flow "a": line 2: excludeTools: unknown tool "powershell"`)

	c.FlowsDir = ""
	cat, err := c.Flows()
	require.NoError(t, err)
	_, ok := cat.Lookup("default")
	require.True(t, ok)
}
