package main

import (
	"fmt"
	"io"

	"github.com/pidispatch/pidispatch/internal/buildinfo"
)

const usageText = `usage: worker [--help | --version]

Drains this host's pidispatch queues: it takes queued jobs from Valkey and runs
each in its own Docker container, after checking the kill switch, the daily and
weekly caps, scoped limits and pause windows, and writes one run record per
attempt.
It runs until SIGINT or SIGTERM, then lets running jobs finish (25 s grace).
It takes no other arguments: every setting is an environment variable, read
from the shell and from ./.env (or the file PI_ENV_FILE names); the shell wins.

The variables that matter most (every variable, its default and its rule are in
docs/configuration.md and .env.example):
  VALKEY_URL        the Valkey the fleet shares (default redis://127.0.0.1:6379)
  VALKEY_PASSWORD   used when VALKEY_URL carries no password
  PI_WORKER_NAME    this host's name; declaring it turns on the host queue and routing
  PI_CONCURRENCY    jobs at once on this machine (default 3)
  PI_DAILY_CAP      container starts per UTC day, fleet-wide (default 25)
  PI_JOB_IMAGE      the job image, never pulled (default pi-job:latest)
  PI_LOGS_DIR       where run records go (default ~/.local/state/pidispatch/runs)
  PI_TRIGGERS_FILE  cron triggers (unset: no cron)

Exit codes: 0 stopped cleanly; 1 failed; 2 refused to boot (bad configuration,
an unwritable PI_LOGS_DIR, or the name is in use): fix it before restarting.

Docs: docs/configuration.md (settings), docs/fleet.md (several hosts),
docs/container-contract.md (what a job image receives). The operator CLI is
pi-dispatch (pi-dispatch help): doctor checks this host, pause stops the fleet.
`

// parseArgs handles the worker's few arguments. It reports whether to boot,
// and otherwise the exit code, having printed what was asked for.
func parseArgs(args []string, stdout, stderr io.Writer) (boot bool, code int) {
	if len(args) == 0 {
		return true, exitOK
	}
	if len(args) == 1 {
		switch args[0] {
		case "--help", "-h", "-help", "help":
			fmt.Fprint(stdout, usageText)
			return false, exitOK
		case "--version", "-version", "version":
			fmt.Fprintf(stdout, "worker %s\n", buildinfo.Version(version))
			return false, exitOK
		}
	}
	fmt.Fprintf(stderr, "worker: unexpected argument %q: the worker takes no arguments, only environment variables (nothing started; see worker --help)\n", args[0])
	return false, exitConfig
}
