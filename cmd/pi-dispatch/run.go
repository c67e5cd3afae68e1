package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/pidispatch/pidispatch/internal/envfile"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed (doctor found a problem, Valkey down)
	exitUsage   = 2 // bad arguments or configuration
)

// env is the command's view of its environment and streams, so tests run
// commands in-process with captured output.
type env struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
	// shell is the process environment alone, and vars the env file layered
	// under it (layerEnvFile): getenv is vars.Getenv. Both are nil in tests
	// that build an env by hand.
	shell func(string) string
	vars  *envfile.Env
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e env, args []string) int
}

// commands lists every subcommand; each lives in its own cmd_<name>.go.
var commands []command

func register(c command) {
	commands = append(commands, c)
	slices.SortFunc(commands, func(a, b command) int { return strings.Compare(a.name, b.name) })
}

// run dispatches to a subcommand and returns the process exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	e := env{getenv: getenv, stdout: stdout, stderr: stderr}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands {
		if c.name == args[0] {
			e, err := layerEnvFile(e, getenv)
			if err != nil {
				fmt.Fprintf(stderr, "pi-dispatch %s: %v\n", c.name, err)
				return exitUsage
			}
			return c.run(ctx, e, args[1:])
		}
	}
	fmt.Fprintf(stderr, "pi-dispatch: unknown command %q (run 'pi-dispatch help' for the list)\n", args[0])
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "pi-dispatch: run an AI coding agent as queued, unattended jobs")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "usage: pi-dispatch <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
}
