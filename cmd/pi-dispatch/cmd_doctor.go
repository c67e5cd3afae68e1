package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/pidispatch/pidispatch/config"
	"io"
	"os"
	"strings"

	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/registry"
	"github.com/pidispatch/pidispatch/runner"
)

func init() {
	register(command{name: "doctor", summary: "check this host: Valkey, Docker, the job image, config, files, the fleet", help: doctorHelp, run: cmdDoctor})
}

const doctorUsage = `usage: pi-dispatch doctor [--env-file PATH]

Prints one line per check (✓ fine, ⚠ suspicious, ✗ broken), each one not ✓
followed by its fix, and exits 1 when any check is ✗. It reads the same
environment as the worker (the env file $PI_ENV_FILE, else ./.env, under the
shell's variables; its first line says where each value came from) and
changes nothing: it never pulls an image. With a forge credential set, it
asks that forge what the credential may do, on the repositories of the
forge triggers, and names each scope, permission or role it lacks
(docs/forges.md).
`

func cmdDoctor(ctx context.Context, e env, args []string) int {
	fset := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fset.SetOutput(e.stderr)
	fset.Usage = func() { fmt.Fprint(e.stderr, doctorUsage); fset.PrintDefaults() }
	envFile := envFileFlag(fset)
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(e.stderr, "pi-dispatch doctor: unexpected argument %q\n", fset.Arg(0))
		return exitUsage
	}

	e, err := applyEnvFileFlag(fset, e, *envFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch doctor: %v\n", err)
		return exitUsage
	}
	cfg, cfgErr := operator.ConfigForDoctor(e.getenv)
	deps := operator.DoctorDeps{ConfigErr: cfgErr, TZ: registry.LocalZone(e.getenv)}
	if rc, err := dialConfigValkey(cfg); err == nil {
		defer rc.Close()
		deps.Valkey = rc
	}
	probe, closeDocker := newDockerProbe()
	defer closeDocker()
	deps.Docker = probe

	checks := append(envSources(e), operator.Doctor(ctx, cfg, deps)...)
	if cfgErr == nil {
		checks = append(checks, folderRootsCheck(cfg))
	}
	checks = append(checks, doctorForgeChecks(ctx, e.getenv, cfg.TriggersFile)...)
	printChecks(e.stdout, checks)
	if operator.Failed(checks) {
		return exitFailure
	}
	return exitOK
}

// printChecks writes one line per check and, under each one that is not ✓,
// its fix; then a summary line.
func printChecks(w io.Writer, checks []operator.Check) {
	var warns, fails int
	for _, c := range checks {
		mark := "✓"
		switch c.Status {
		case operator.CheckWarn:
			mark = "⚠"
			warns++
		case operator.CheckFail:
			mark = "✗"
			fails++
		}
		fmt.Fprintf(w, "%s %s\n", mark, c.Detail)
		if c.Status != operator.CheckOK && c.Fix != "" {
			fmt.Fprintf(w, "    fix: %s\n", c.Fix)
		}
	}
	switch {
	case fails > 0:
		fmt.Fprintf(w, "%d %s, %d %s\n", fails, pluralize(fails, "problem", "problems"), warns, pluralize(warns, "warning", "warnings"))
	case warns > 0:
		fmt.Fprintf(w, "ready, with %d %s\n", warns, pluralize(warns, "warning", "warnings"))
	default:
		fmt.Fprintln(w, "ready")
	}
}

func pluralize(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// dockerProbe is doctor's view of the local Docker daemon: a ping and the
// runner's never-pulling image lookups.
type dockerProbe struct {
	c  *client.Client
	rt *runner.Docker
}

var _ operator.DoctorDocker = dockerProbe{}

func (p dockerProbe) Ping(ctx context.Context) error {
	_, err := p.c.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	return err
}

func (p dockerProbe) ImagePresent(ctx context.Context, image string) (bool, error) {
	return p.rt.ImagePresent(ctx, image)
}

func (p dockerProbe) ImageDigest(ctx context.Context, image string) (string, error) {
	return p.rt.ImageDigest(ctx, image)
}

// brokenDocker reports why no Docker client could be built, on every probe.
type brokenDocker struct{ err error }

var _ operator.DoctorDocker = brokenDocker{}

func (b brokenDocker) Ping(context.Context) error { return b.err }
func (b brokenDocker) ImagePresent(context.Context, string) (bool, error) {
	return false, b.err
}
func (b brokenDocker) ImageDigest(context.Context, string) (string, error) { return "", b.err }

// newDockerProbe connects to the daemon DOCKER_HOST (or the default socket)
// names, with the API version negotiated.
func newDockerProbe() (operator.DoctorDocker, func()) {
	dc, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return brokenDocker{fmt.Errorf("docker client: %w", err)}, func() {}
	}
	rt, err := runner.NewDocker(dc, runner.Config{})
	if err != nil {
		_ = dc.Close()
		return brokenDocker{err}, func() {}
	}
	return dockerProbe{c: dc, rt: rt}, func() { _ = dc.Close() }
}

// folderRootsCheck says which folders folder jobs may work in, and how to
// let them run at all when none is set.
func folderRootsCheck(cfg config.Config) operator.Check {
	if len(cfg.FolderRoots) == 0 {
		return operator.Check{Status: operator.CheckWarn, Name: "folder-roots",
			Detail: "PI_FOLDER_ROOTS is not set: every folder job (run, cron, chain) is refused folder-not-allowed",
			Fix:    config.FolderRootsHint}
	}
	var missing []string
	for _, r := range cfg.FolderRoots {
		if fi, err := os.Stat(r); err != nil || !fi.IsDir() {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		return operator.Check{Status: operator.CheckWarn, Name: "folder-roots",
			Detail: "PI_FOLDER_ROOTS names folders that are not directories here: " + strings.Join(missing, ", "),
			Fix:    "create them or remove them from PI_FOLDER_ROOTS"}
	}
	return operator.Check{Status: operator.CheckOK, Name: "folder-roots", Detail: "folder jobs may work in " + strings.Join(cfg.FolderRoots, ", ")}
}
