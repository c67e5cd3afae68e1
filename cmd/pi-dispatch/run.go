package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/pidispatch/pidispatch/internal/buildinfo"
	"github.com/pidispatch/pidispatch/internal/envfile"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

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
	// stdin is what `run --task -` reads; nil is the process's stdin.
	stdin io.Reader
	// shell is the process environment alone, and vars the env file layered
	// under it (layerEnvFile): getenv is vars.Getenv. Both are nil in tests
	// that build an env by hand.
	shell func(string) string
	vars  *envfile.Env
}

// command is one subcommand.
type command struct {
	name    string
	summary string // one line, in the command list
	help    string // the usage line, what it does and its flags (help.go)
	run     func(ctx context.Context, e env, args []string) int
	// killSwitch marks the commands that stop spend or show it (pause,
	// resume, status, cancel, hosts, dash): no misconfiguration beyond
	// VALKEY_URL and VALKEY_PASSWORD may stop them, so a malformed env file
	// line is a warning to them.
	killSwitch bool
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
	switch {
	case len(args) == 0:
		usage(stderr)
		return exitUsage
	case isHelp(args[0]) || args[0] == "help":
		if len(args) == 1 {
			usage(stdout)
			return exitOK
		}
		return commandHelp(e, args[1], args[2:])
	case args[0] == "--version" || args[0] == "-version" || args[0] == "version":
		fmt.Fprintf(stdout, "pi-dispatch %s\n", buildinfo.Version(version))
		return exitOK
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(stderr, "pi-dispatch: unknown command %q (run 'pi-dispatch help' for the list)\n", args[0])
		return exitUsage
	}
	if len(args) == 2 && isHelp(args[1]) {
		fmt.Fprint(stdout, c.help)
		return exitOK
	}
	if c.killSwitch {
		e, err := layerEnvFileLenient(e, getenv, c.name)
		if err != nil {
			fmt.Fprintf(stderr, "pi-dispatch %s: %v\n", c.name, err)
			return exitUsage
		}
		return c.run(ctx, e, args[1:])
	}
	e, err := layerEnvFile(e, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "pi-dispatch %s: %v\n", c.name, err)
		return exitUsage
	}
	return c.run(ctx, e, args[1:])
}

func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "-help" }

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// commandHelp prints one command's help: pi-dispatch help <command>.
func commandHelp(e env, name string, extra []string) int {
	c, ok := lookup(name)
	switch {
	case !ok:
		fmt.Fprintf(e.stderr, "pi-dispatch help: unknown command %q (run 'pi-dispatch help' for the list)\n", name)
		return exitUsage
	case len(extra) > 0:
		fmt.Fprintf(e.stderr, "pi-dispatch help: unexpected argument %q (usage: pi-dispatch help <command>)\n", extra[0])
		return exitUsage
	}
	fmt.Fprint(e.stdout, c.help)
	return exitOK
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "pi-dispatch: run an AI coding agent as queued, unattended jobs")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "usage: pi-dispatch <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "pi-dispatch help <command> (or <command> --help) describes one command;")
	fmt.Fprintln(w, "pi-dispatch --version prints the version. The worker is a separate binary")
	fmt.Fprintln(w, "(worker --help). Docs: docs/configuration.md, docs/fleet.md.")
}
