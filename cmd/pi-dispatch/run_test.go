package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

// result is one in-process run of the CLI.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs the CLI in-process with the given environment.
func runCLI(t *testing.T, vars map[string]string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, func(k string) string { return vars[k] }, &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

func TestUnknownCommand(t *testing.T) {
	r := runCLI(t, nil, "frobnicate")
	if r.code != exitUsage || !strings.Contains(r.stderr, `unknown command "frobnicate"`) {
		t.Fatalf("%+v", r)
	}
}

func TestHelpListsCommands(t *testing.T) {
	r := runCLI(t, nil, "help")
	if r.code != exitOK || !strings.Contains(r.stdout, "usage: pi-dispatch <command>") {
		t.Fatalf("%+v", r)
	}
	for _, c := range commands {
		if !strings.Contains(r.stdout, c.name) {
			t.Errorf("help does not list %s", c.name)
		}
	}
}

// Every command has a help text, printed the same by `help <command>`,
// `<command> --help` and `<command> -h`, on stdout with exit 0.
func TestCommandHelp(t *testing.T) {
	for _, c := range commands {
		if !strings.HasPrefix(c.help, "usage: pi-dispatch "+c.name) || strings.Count(c.help, "\n") < 3 {
			t.Errorf("%s: help is not a usage line and a description:\n%s", c.name, c.help)
			continue
		}
		for _, args := range [][]string{{"help", c.name}, {c.name, "--help"}, {c.name, "-h"}} {
			r := runCLI(t, nil, args...)
			if r.code != exitOK || r.stdout != c.help || r.stderr != "" {
				t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 0 and the help", args, r.code, r.stdout, r.stderr)
			}
		}
	}
	if r := runCLI(t, nil, "help", "frobnicate"); r.code != exitUsage || !strings.Contains(r.stderr, `unknown command "frobnicate"`) {
		t.Errorf("help frobnicate: %+v", r)
	}
}

// A command's help names every flag the command parses: the flags are read
// from the command's own flag parser, so a flag added without its help fails.
func TestCommandHelpNamesEveryFlag(t *testing.T) {
	flagRE := regexp.MustCompile(`(?m)(?:^\s+-|--)([a-z][a-z-]*)`)
	prefix := map[string][]string{"service": {"render"}}
	for _, c := range commands {
		var out, errOut bytes.Buffer
		e := env{getenv: func(string) string { return "" }, stdout: &out, stderr: &errOut}
		if code := c.run(context.Background(), e, append(prefix[c.name], "--help")); code != exitOK {
			t.Errorf("%s --help in the command itself: exit %d", c.name, code)
		}
		for _, m := range flagRE.FindAllStringSubmatch(out.String()+errOut.String(), -1) {
			if m[1] != "help" && !strings.Contains(c.help, "--"+m[1]) {
				t.Errorf("%s: help does not name --%s", c.name, m[1])
			}
		}
	}
}

func TestVersion(t *testing.T) {
	r := runCLI(t, nil, "--version")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "pi-dispatch ") || strings.TrimSpace(r.stdout) == "pi-dispatch" {
		t.Fatalf("%+v", r)
	}
}
