package main

import (
	"bytes"
	"context"
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
