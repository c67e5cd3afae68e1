package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/stack"
)

func init() {
	register(command{name: "receive", summary: "serve forge webhooks (GitHub, GitLab, Forgejo) and poll GitHub; matching events become jobs", help: receiveHelp, run: runReceive})
}

const receiveHelp = `usage: pi-dispatch receive [--check]

Serves the forge webhook routes on RECEIVER_BIND:RECEIVER_PORT (default
0.0.0.0:3000): /github (WEBHOOK_SECRET), /gitlab (GITLAB_WEBHOOK_MODE and
GITLAB_WEBHOOK_SECRET), /forgejo (FORGEJO_WEBHOOK_SECRET), /healthz and
/metrics. With POLL_REPOS it also polls those GitHub repositories every
POLL_INTERVAL_SECONDS. Events are matched against the forge triggers of
PI_TRIGGERS_FILE (reloaded when the file changes); a match from a person with
write permission (triage for labels) is enqueued for the fleet. With
GITHUB_AUTH_SOURCE=app, GitHub is read with the App's installation tokens
(read-only, one repository each, minted again before they expire) and the
App's bot user is the receiver's own.

  --check   validate the configuration and the triggers file, ask each forge
            what its credential may do (on the forge triggers'
            repositories), then exit

Exit codes: 0 stopped by SIGTERM/SIGINT (or --check passed), 1 a runtime
failure, 2 an invalid configuration or triggers file, or (--check) a
credential that lacks a scope, permission or role docs/forges.md asks for.
docs/forges.md.
`

func runReceive(ctx context.Context, e env, args []string) int {
	fset := flag.NewFlagSet("receive", flag.ContinueOnError)
	fset.SetOutput(e.stderr)
	fset.Usage = func() { fmt.Fprint(e.stderr, receiveHelp) }
	checkOnly := fset.Bool("check", false, "validate the configuration, the triggers file and the forge credentials, then exit")
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(e.stderr, "pi-dispatch receive: unexpected argument %q\n", fset.Arg(0))
		return exitUsage
	}
	if *checkOnly {
		// A misspelt name is often why a check fails: said first.
		for _, u := range unknownVars(e) {
			fmt.Fprintf(e.stderr, "pi-dispatch receive: warning: %s\n", u)
		}
	}
	cfg, err := config.Load(e.getenv)
	if err != nil {
		printConfigErrors(e.stderr, "pi-dispatch receive", err)
		return exitUsage
	}
	fc, err := config.LoadForge(e.getenv)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch receive: invalid configuration: %v (docs/configuration.md)\n", err)
		return exitUsage
	}
	plan, err := stack.PlanIntake(cfg, fc)
	if err != nil {
		printConfigErrors(e.stderr, "pi-dispatch receive", err)
		return exitUsage
	}
	if *checkOnly {
		fmt.Fprintf(e.stdout, "ok: %s\n", plan)
		found, err := checkForgeCredentials(ctx, fc.Credentials, cfg.TriggersFile)
		if err != nil {
			printConfigErrors(e.stderr, "pi-dispatch receive", err)
			return exitUsage
		}
		if printCredentialChecks(e.stdout, e.stderr, "pi-dispatch receive", found) {
			return exitUsage
		}
		return exitOK
	}
	logger := slog.New(slog.NewJSONHandler(e.stderr, nil))
	warnUnknownVars(e, logger.With("host", cfg.WorkerName))
	intake, err := plan.Build(ctx, logger)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch receive: %v\n", err)
		return exitCodeOf(err)
	}
	defer intake.Close()
	if err := intake.Run(ctx); err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch receive: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// exitCodeOf is exit 2 for a configuration the intake refused, else 1.
func exitCodeOf(err error) int {
	var ce *config.ConfigError
	var ces config.ConfigErrors
	if errors.As(err, &ce) || errors.As(err, &ces) {
		return exitUsage
	}
	return exitFailure
}
