package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/operator/dash"
)

func init() {
	register(command{name: "dash", killSwitch: true, summary: "serve a read-only web dashboard of the fleet on this machine (--allow-actions for pause, resume, cancel)", help: dashHelp, run: runDash})
}

const (
	dashUsage         = "usage: pi-dispatch dash [--listen 127.0.0.1:8477] [--allow-actions] [--allow-remote]"
	dashDefaultListen = "127.0.0.1:8477"
	// dashShutdownGrace bounds the wait for open requests at SIGINT.
	dashShutdownGrace = 5 * time.Second
)

// dashFlags are the command's flags.
type dashFlags struct {
	listen          string
	actions, remote bool
}

// parseDashFlags parses args; done means the command ends with code (help
// printed, or a bad argument named).
func parseDashFlags(e env, args []string) (f dashFlags, code int, done bool) {
	fs := flag.NewFlagSet("dash", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.listen, "listen", dashDefaultListen, "the address to serve on")
	fs.BoolVar(&f.actions, "allow-actions", false, "offer pause, resume and cancel buttons")
	fs.BoolVar(&f.remote, "allow-remote", false, "serve on an address that is not loopback")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(e.stdout, dashUsage)
			return f, exitOK, true
		}
		fmt.Fprintf(e.stderr, "pi-dispatch dash: %v (%s)\n", err, dashUsage)
		return f, exitUsage, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "pi-dispatch dash: unexpected argument %q (%s)\n", fs.Arg(0), dashUsage)
		return f, exitUsage, true
	}
	return f, exitOK, false
}

func runDash(ctx context.Context, e env, args []string) int {
	flags, code, done := parseDashFlags(e, args)
	if done {
		return code
	}
	loopback, err := loopbackAddr(flags.listen)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch dash: --listen %s: %v (%s)\n", flags.listen, err, dashUsage)
		return exitUsage
	}
	if !loopback && !flags.remote {
		fmt.Fprintf(e.stderr, "pi-dispatch dash: --listen %s is not a loopback address. Its one-time address is "+
			"its only login: anyone who sees it, or sniffs the plain HTTP session, reads the fleet%s. Serve it on 127.0.0.1 and reach it through an SSH tunnel, "+
			"or add --allow-remote (docs/dashboard.md)\n", flags.listen, actionsRisk(flags.actions))
		return exitUsage
	}
	caps, code := dashCaps(e)
	if code != exitOK {
		return code
	}
	client, url, code := ksConnect(e, "dash")
	if code != exitOK {
		return code
	}
	defer client.Close()
	if err := client.Ping(ctx).Err(); err != nil {
		return ksUnreachable(e.stderr, url, err)
	}
	host := e.getenv("PI_WORKER_NAME")
	if fleet.ValidateName(host) != nil {
		host = fleet.DefaultName()
	}
	caps.Host = host
	// What became of each run's pull request, on the job page and in the
	// charts' merged share: the receiver's outcomes, only those the fleet
	// key signed when there is one.
	prs := fleetstate.NewPullRequestsWith(client, fleetstate.PullRequestsConfig{Key: caps.FleetKey, Logger: caps.Logger})
	caps.Explain.PullRequests = prs
	src, err := dash.NewValkey(client, caps)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch dash: %v\n", err)
		return exitFailure
	}
	defer src.Close(context.Background())
	opts := dash.Options{Logger: slog.New(slog.NewTextHandler(e.stderr, nil)), Host: host}
	opts.PullRequests = prs
	if cfg, _ := operator.ConfigForDoctor(e.getenv); cfg.Spend.DollarWindows() {
		opts.Dollars = dash.FleetDollars(fleetstate.NewDollars(client, fleetstate.DollarsConfig{
			DailyMicros: cfg.Spend.DailyCostMicros, WeeklyMicros: cfg.Spend.WeeklyCostMicros, MonthlyMicros: cfg.Spend.MonthlyCostMicros,
		}))
	}
	if flags.actions {
		opts.Actions = src
	}
	if !loopback {
		fmt.Fprintf(e.stderr, "WARNING: serving the dashboard on %s, which is not loopback. Its one-time address is its "+
			"only login, sent over plain HTTP: anyone who sees it, or the session, reads the fleet%s.\n", flags.listen, actionsRisk(flags.actions))
	}
	return serveDash(ctx, e, flags.listen, loopback, src, opts)
}

func actionsRisk(actions bool) string {
	if actions {
		return " and, with --allow-actions, can pause it and cancel its jobs"
	}
	return ""
}

// serveDash listens, prints the URL and serves until ctx ends (SIGINT).
func serveDash(ctx context.Context, e env, listen string, loopback bool, src dash.Source, opts dash.Options) int {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch dash: %v\n", err)
		return exitFailure
	}
	addr := ln.Addr().(*net.TCPAddr)
	if loopback {
		// Only the names of this address answer: a DNS name rebound to
		// 127.0.0.1 by another site reaches nothing.
		port := strconv.Itoa(addr.Port)
		opts.Hosts = []string{addr.String(), net.JoinHostPort("localhost", port)}
	}
	h, err := dash.New(src, opts)
	if err != nil {
		ln.Close()
		fmt.Fprintf(e.stderr, "pi-dispatch dash: %v\n", err)
		return exitFailure
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	mode := "read-only"
	if opts.Actions != nil {
		mode = "actions enabled: pause, resume, cancel"
	}
	// The one-time address goes to the operator's terminal only: the first
	// browser to open it gets the session, and nothing else does.
	fmt.Fprintf(e.stdout, "dashboard: %s (%s; open it once, in one browser; Ctrl-C stops it)\n", h.LoginURL("http://"+addr.String()), mode)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		fmt.Fprintf(e.stderr, "pi-dispatch dash: %v\n", err)
		return exitFailure
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), dashShutdownGrace)
	defer cancel()
	_ = srv.Shutdown(sctx)
	<-served
	return exitOK
}

// loopbackAddr reports whether host:port listens on loopback only. An empty
// host (every interface) is not loopback; nor is a name other than
// localhost, which could resolve anywhere.
func loopbackAddr(listen string) (bool, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return false, err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return false, fmt.Errorf("port %q is not a number", port)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// dashCaps reads the caps the page compares the container starts with, by
// the worker's own rules. A cap the worker would refuse is a warning and
// shows as no cap: like the kill switch, the dashboard (and its pause
// button) works whatever else is misconfigured.
func dashCaps(e env) (dash.ValkeyConfig, int) {
	cfg, err := operator.ConfigForDoctor(e.getenv)
	caps := dash.ValkeyConfig{DailyCap: cfg.DailyCap, WeeklyCap: cfg.WeeklyCap, LogsDir: cfg.LogsDir}
	var errs config.ConfigErrors
	if errors.As(err, &errs) {
		for _, ce := range errs {
			switch ce.Var {
			case "PI_DAILY_CAP":
				caps.DailyCap = 0
			case "PI_WEEKLY_CAP":
				caps.WeeklyCap = 0
			case "PI_MONTHLY_CAP", "PI_DAILY_COST_USD", "PI_WEEKLY_COST_USD", "PI_MONTHLY_COST_USD":
			default:
				continue
			}
			fmt.Fprintf(e.stderr, "pi-dispatch dash: warning: %v; the page shows that window without its cap (docs/configuration.md)\n", ce)
		}
	}
	// The job page explains a job with this host's view, as explain does.
	caps.Explain, _ = operator.ExplainOptionsFromConfig(cfg)
	// The job page shows only live entries the fleet key signed.
	key, code := fleetKeyFromEnv(e, "dash")
	if code != exitOK {
		return caps, code
	}
	caps.FleetKey = key
	caps.Logger = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return caps, exitOK
}
