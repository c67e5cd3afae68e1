package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/internal/check"
)

func init() {
	register(command{name: "service", summary: "print a systemd unit for the worker of this folder (service render)", help: serviceHelp, run: cmdService})
}

// Defaults of service render.
const (
	defaultWorkerBin   = "/usr/local/bin/pi-dispatch-worker"
	defaultServiceUser = "pi-dispatch"
)

const serviceUsage = `usage: pi-dispatch service render [--dir DIR] [--worker-bin PATH] [--user NAME]
       pi-dispatch service render --receiver [--dir DIR] [--bin PATH] [--user NAME]

Prints a systemd unit that runs the worker with DIR (default: the current
folder) as its working directory and DIR/.env as its environment. Install it:
  pi-dispatch service render > /etc/systemd/system/pi-dispatch-worker.service
  systemctl daemon-reload && systemctl enable --now pi-dispatch-worker
With --receiver it prints the forge receiver's unit (pi-dispatch receive)
instead: pi-dispatch-receiver.service.
`

// unitPathRE is what a path may hold in the unit: systemd reads '%' as a
// specifier, quotes and backslashes as syntax, and spaces split ExecStart.
var unitPathRE = regexp.MustCompile(`^/[A-Za-z0-9._/@+-]*$`)

// unitUserRE is a portable user name (useradd's default rule).
var unitUserRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

func cmdService(_ context.Context, e env, args []string) int {
	if len(args) == 0 || args[0] != "render" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(e.stdout, serviceUsage)
			return exitOK
		}
		fmt.Fprint(e.stderr, "pi-dispatch service: only render is supported; install the unit it prints with systemctl (see below)\n"+serviceUsage)
		return exitUsage
	}
	fset := flag.NewFlagSet("service render", flag.ContinueOnError)
	fset.SetOutput(e.stderr)
	fset.Usage = func() { fmt.Fprint(e.stderr, serviceUsage); fset.PrintDefaults() }
	dirFlag := fset.String("dir", "", "the deployment folder holding .env (default: the current folder)")
	bin := fset.String("worker-bin", defaultWorkerBin, "absolute path of the worker binary (go build -o it ./cmd/worker)")
	user := fset.String("user", defaultServiceUser, `the user the worker runs as, in group docker ("" runs it as root)`)
	receiverUnit := fset.Bool("receiver", false, "render the forge receiver's unit (pi-dispatch receive) instead of the worker's")
	cliBin := fset.String("bin", defaultCLIBin, "with --receiver: absolute path of the pi-dispatch binary")
	if err := fset.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(e.stderr, "pi-dispatch service render: unexpected argument %q\n", fset.Arg(0))
		return exitUsage
	}
	dir := *dirFlag
	if dir == "" {
		d, err := deploymentDir("")
		if err != nil {
			fmt.Fprintf(e.stderr, "pi-dispatch service render: %v\n", err)
			return exitUsage
		}
		dir = d
	}
	// --dir is not required to exist: a unit is often rendered for the
	// machine it will be installed on.
	dir, err := filepath.Abs(dir)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch service render: --dir: %v\n", err)
		return exitUsage
	}
	for _, p := range []struct{ flag, value string }{{"--dir", dir}, {"--worker-bin", *bin}, {"--bin", *cliBin}} {
		if !unitPathRE.MatchString(p.value) {
			fmt.Fprintf(e.stderr, "pi-dispatch service render: %s %q must be an absolute path of letters, digits and . _ / @ + - (systemd reads %% quotes, backslashes and spaces as syntax)\n", p.flag, p.value)
			return exitUsage
		}
	}
	if *user != "" && !unitUserRE.MatchString(*user) {
		fmt.Fprintf(e.stderr, "pi-dispatch service render: --user %q is not a user name ([a-z_][a-z0-9_-]{0,31})\n", *user)
		return exitUsage
	}
	if *receiverUnit {
		fmt.Fprint(e.stdout, renderReceiverUnit(dir, filepath.Clean(*cliBin), *user))
		return exitOK
	}
	fmt.Fprint(e.stdout, renderUnit(dir, filepath.Clean(*bin), *user, stopTimeout(e)))
	return exitOK
}

// stopTimeout is the unit's TimeoutStopSec: the worker's shutdown grace
// (PI_SHUTDOWN_GRACE, by the worker's rule) plus 35 s for stopping the
// containers still running and leaving the registry, and never under 60 s.
// A grace the worker would refuse is a warning here: the worker names it.
func stopTimeout(e env) time.Duration {
	grace := config.DefaultShutdownGrace
	if raw := e.getenv("PI_SHUTDOWN_GRACE"); raw != "" {
		d, rule := check.Duration(raw)
		if rule != "" || d < config.MinShutdownGrace || d > config.MaxShutdownGrace {
			fmt.Fprintf(e.stderr, "pi-dispatch service render: warning: PI_SHUTDOWN_GRACE=%q is not a duration of 1s..1h; the worker will refuse it\n", raw)
		} else {
			grace = d
		}
	}
	return max(60*time.Second, grace+35*time.Second)
}

// renderUnit is the worker's systemd unit. The choices, each for a reason:
//   - Restart=on-failure, but never after exit 2: that is a refused boot (an
//     invalid configuration, a worker name in use elsewhere) that a restart
//     loop cannot fix, only hide.
//   - KillMode=mixed with SIGTERM and PI_SHUTDOWN_GRACE + 35 s (at least
//     60 s): the worker alone gets SIGTERM, stops fetching, lets running
//     jobs finish (PI_SHUTDOWN_GRACE), stops their containers (5 s grace)
//     and deletes its registry row; only then is the rest of the group (a
//     resolver still running) killed.
//   - The docker socket is the one privilege it needs (group docker), which
//     is root-equivalent: the hardening keeps the worker's own process from
//     gaining more. No PrivateTmp, because the paths the worker hands to
//     Docker (job folders, $TMPDIR/pi-dispatch/jobs) must be the host's; no
//     ProtectHome, because job folders often live in /home; no UMask, because
//     the /job folder must stay readable by the container's user.
func renderUnit(dir, bin, user string, stop time.Duration) string {
	var b strings.Builder
	w := func(s string) { b.WriteString(s + "\n") }
	w("# pidispatch worker: drains this host's queues, one Docker container per job.")
	w("# Rendered by: pi-dispatch service render --dir " + dir)
	w("# Install: copy to /etc/systemd/system/pi-dispatch-worker.service, then")
	w("#   systemctl daemon-reload && systemctl enable --now pi-dispatch-worker")
	if user != "" {
		w("# The user must exist: useradd --system --home-dir " + dir + " " + user)
	}
	w("")
	w("[Unit]")
	w("Description=pidispatch worker (" + dir + ")")
	w("Wants=network-online.target")
	w("After=network-online.target docker.service")
	w("")
	w("[Service]")
	w("Type=simple")
	if user != "" {
		w("User=" + user)
		w("SupplementaryGroups=docker")
	}
	w("WorkingDirectory=" + dir)
	w("EnvironmentFile=" + dir + "/.env")
	w("ExecStart=" + bin)
	w("Restart=on-failure")
	w("RestartSec=5")
	w("RestartPreventExitStatus=2")
	w("KillMode=mixed")
	w("KillSignal=SIGTERM")
	w("TimeoutStopSec=" + strconv.Itoa(int(stop.Seconds())))
	w("NoNewPrivileges=yes")
	w("ProtectSystem=full")
	w("ProtectKernelTunables=yes")
	w("ProtectKernelModules=yes")
	w("ProtectControlGroups=yes")
	w("RestrictSUIDSGID=yes")
	w("LockPersonality=yes")
	w("")
	w("[Install]")
	w("WantedBy=multi-user.target")
	return b.String()
}
