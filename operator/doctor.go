package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/registry"
	"github.com/pidispatch/pidispatch/valkey"
)

// CheckStatus is the verdict of one doctor check.
type CheckStatus int

// Verdicts. Only CheckFail makes doctor exit non-zero: a warning names something
// suspicious that this host alone may not be able to fix (a peer on another build).
const (
	CheckOK CheckStatus = iota
	CheckWarn
	CheckFail
)

func (s CheckStatus) String() string {
	switch s {
	case CheckOK:
		return "ok"
	case CheckWarn:
		return "warn"
	case CheckFail:
		return "fail"
	}
	return fmt.Sprintf("CheckStatus(%d)", int(s))
}

// Check is one line of doctor's report.
type Check struct {
	Status CheckStatus
	// Name is the check's stable id, for programs and tests: valkey, docker,
	// job-image, config, triggers, scoped-limits, pause-windows, logs-dir,
	// fleet, fleet-name, fleet-image, fleet-tz, fleet-stale, fleet-registry,
	// forge-credential (added by the pi-dispatch command).
	Name string
	// Detail is what was found, one line.
	Detail string
	// Fix is what to do about it, one line; empty when Status is CheckOK.
	Fix string
}

// DoctorDocker is the container engine as doctor probes it. It never pulls.
type DoctorDocker interface {
	Ping(ctx context.Context) error
	ImagePresent(ctx context.Context, image string) (bool, error)
	ImageDigest(ctx context.Context, image string) (string, error)
}

// DefaultDoctorTimeout bounds each probe of Doctor.
const DefaultDoctorTimeout = 2 * time.Second

// StaleRowAge is the age past which doctor calls a peer's row stale: a dead
// worker or a skewed clock, both of which matter to a fleet.
const StaleRowAge = 5 * time.Minute

// DoctorDeps are what Doctor probes. Valkey and Docker are required; a nil one
// is reported as a failed check, never a panic.
type DoctorDeps struct {
	// Valkey is a client of cfg.ValkeyURL.
	Valkey redis.UniversalClient
	// Docker is this host's container engine.
	Docker DoctorDocker
	// ConfigErr is the error the configuration was loaded with (see
	// ConfigForDoctor); each *ConfigError in it is one failed check. When nil,
	// cfg.Validate() is checked instead.
	ConfigErr error
	// Self is this host's worker name, the row that is not a peer. Default
	// cfg.WorkerName, which is what the worker on this host publishes.
	Self string
	// TZ is this host's IANA zone, compared with the peers'. Default
	// LocalZone(os.Getenv), the zone the worker publishes.
	TZ string
	// Timeout bounds each probe. Default DefaultDoctorTimeout.
	Timeout time.Duration
}

// Doctor checks that this host can run jobs as cfg describes: Valkey and
// Docker reachable, the job image present, the configuration and its files
// valid, the logs directory writable, and, only when a peer exists in the
// host registry, how this host compares with the fleet. It changes nothing
// (it never pulls an image nor creates a directory) and returns every check,
// in a fixed order; the caller formats them. Each probe is bounded by
// deps.Timeout.
func Doctor(ctx context.Context, cfg config.Config, deps DoctorDeps) []Check {
	deps.Timeout = cmp.Or(deps.Timeout, DefaultDoctorTimeout)
	deps.Self = cmp.Or(deps.Self, cfg.WorkerName)
	if deps.TZ == "" {
		deps.TZ = registry.LocalZone(os.Getenv)
	}
	d := doctor{cfg: cfg, deps: deps}

	valkeyUp := d.valkey(ctx)
	dockerUp := d.docker(ctx)
	imagePresent := d.jobImage(ctx, dockerUp)
	d.config()
	d.fleetKey()
	d.spend()
	d.triggers()
	d.policyFile("scoped-limits", "PI_SCOPED_LIMITS_FILE", "scoped limits", cfg.ScopedLimitsFile, func(p string) (int, error) {
		l, err := config.LoadScopedLimits(p)
		return l.Len(), err
	})
	d.policyFile("pause-windows", "PI_PAUSE_WINDOWS_FILE", "pause windows", cfg.PauseWindowsFile, func(p string) (int, error) {
		w, err := config.LoadPauseWindows(p)
		return w.Len(), err
	})
	d.logsDir()
	d.fleet(ctx, valkeyUp, imagePresent)
	d.queues(ctx, valkeyUp)
	return d.checks
}

// Failed reports whether any check failed.
func Failed(checks []Check) bool {
	return slices.ContainsFunc(checks, func(c Check) bool { return c.Status == CheckFail })
}

type doctor struct {
	cfg    config.Config
	deps   DoctorDeps
	checks []Check
}

func (d *doctor) ok(name, format string, args ...any) {
	d.checks = append(d.checks, Check{Status: CheckOK, Name: name, Detail: oneLine(fmt.Sprintf(format, args...))})
}

func (d *doctor) warn(name, fix, format string, args ...any) {
	d.checks = append(d.checks, Check{Status: CheckWarn, Name: name, Detail: oneLine(fmt.Sprintf(format, args...)), Fix: fix})
}

func (d *doctor) fail(name, fix, format string, args ...any) {
	d.checks = append(d.checks, Check{Status: CheckFail, Name: name, Detail: oneLine(fmt.Sprintf(format, args...)), Fix: fix})
}

func (d *doctor) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.deps.Timeout)
}

func (d *doctor) valkey(ctx context.Context) bool {
	url := config.RedactURL(d.cfg.ValkeyURL)
	fix := "start Valkey (docker compose -f deploy/docker-compose.yml up -d valkey) or point VALKEY_URL at it"
	if d.deps.Valkey == nil {
		d.fail("valkey", fix, "Valkey at %s: no client", url)
		return false
	}
	pctx, cancel := d.bounded(ctx)
	defer cancel()
	err := d.deps.Valkey.Ping(pctx).Err()
	switch {
	case valkey.IsAuthRefused(err): // reachable: "start Valkey" would mislead
		d.fail("valkey", "set VALKEY_PASSWORD or put the password in VALKEY_URL", "Valkey at %s refused authentication: %v", url, err)
		return false
	case err != nil:
		d.fail("valkey", fix, "Valkey unreachable at %s within %s: %v", url, d.deps.Timeout, err)
		return false
	}
	d.ok("valkey", "Valkey reachable at %s", url)
	return true
}

func (d *doctor) docker(ctx context.Context) bool {
	fix := "start the Docker daemon and let this user use its socket (group docker), or set DOCKER_HOST"
	if d.deps.Docker == nil {
		d.fail("docker", fix, "Docker: no client")
		return false
	}
	pctx, cancel := d.bounded(ctx)
	defer cancel()
	if err := d.deps.Docker.Ping(pctx); err != nil {
		d.fail("docker", fix, "Docker unreachable within %s: %v", d.deps.Timeout, err)
		return false
	}
	d.ok("docker", "Docker reachable")
	return true
}

func (d *doctor) jobImage(ctx context.Context, dockerUp bool) bool {
	image := d.cfg.JobImage
	if !dockerUp {
		d.warn("job-image", "fix Docker first, then run doctor again", "job image %s not checked: Docker is unreachable", image)
		return false
	}
	pctx, cancel := d.bounded(ctx)
	defer cancel()
	present, err := d.deps.Docker.ImagePresent(pctx, image)
	switch {
	case err != nil:
		d.fail("job-image", "check PI_JOB_IMAGE and the Docker daemon", "job image %s could not be inspected: %v", image, err)
		return false
	case !present:
		d.fail("job-image", ImageFix(image), "job image %s is not on this host (jobs are refused job-image-missing; the worker never pulls)", image)
		return false
	}
	d.ok("job-image", "job image %s present", image)
	return true
}

// ImageFix is the one-line fix for a job image absent from this host. The
// worker never pulls: the operator builds or pulls it, once per host.
func ImageFix(image string) string {
	if hasRegistryHost(image) {
		return "build or pull it: docker pull " + image
	}
	return "build or pull it: docker pull <registry>/" + image + " && docker tag <registry>/" + image + " " + image +
		" (or docker build -t " + image + " <agent image folder>)"
}

// hasRegistryHost reports whether an image reference names a registry host
// (its first path component has a dot or a colon, or is localhost).
func hasRegistryHost(image string) bool {
	first, _, ok := strings.Cut(image, "/")
	return ok && (strings.ContainsAny(first, ".:") || first == "localhost")
}

func (d *doctor) config() {
	err := d.deps.ConfigErr
	if err == nil {
		err = d.cfg.Validate()
	}
	if err == nil {
		declared := "undeclared, single-host routing"
		if d.cfg.WorkerNameDeclared {
			declared = "declared, host routing on"
		}
		d.ok("config", "configuration valid (worker %s, %s)", d.cfg.WorkerName, declared)
		return
	}
	var errs config.ConfigErrors
	if !errors.As(err, &errs) {
		var ce *config.ConfigError
		if errors.As(err, &ce) {
			errs = config.ConfigErrors{ce}
		}
	}
	if len(errs) == 0 {
		d.fail("config", "fix the configuration (.env); the worker refuses to boot (exit 2)", "configuration invalid: %v", err)
		return
	}
	for _, ce := range errs {
		d.fail("config", "fix "+ce.Var+" in .env; the worker refuses to boot with it (exit 2)", "%v", ce)
	}
}

// fleetKey says what this host's signing setup lets a Valkey writer do:
// with a key, nothing unsigned runs outside the opted-in queues; without
// one, every job but a cron run is refused unless its queue opted in, and
// an opted-in queue runs whatever anyone who can write to Valkey queues.
func (d *doctor) fleetKey() {
	key, unsigned := d.cfg.FleetKey.IsSet(), d.cfg.UnsignedQueues
	fix := "set PI_FLEET_KEY_FILE to the fleet's key on every host (pi-dispatch init writes one)"
	switch {
	case key && len(unsigned) == 0:
		d.ok("fleet-key", "fleet key set (PI_FLEET_KEY_FILE): jobs and registry rows are signed; unsigned ones are refused")
	case key:
		d.warn("fleet-key", "remove PI_UNSIGNED_QUEUES once its producers sign (docs/security.md)",
			"fleet key set, but %s take unsigned jobs (PI_UNSIGNED_QUEUES): anyone who can write to Valkey can queue jobs there", strings.Join(unsigned, ","))
	case len(unsigned) == 0:
		d.warn("fleet-key", fix,
			"no fleet key: every job but a cron run is refused job-unsigned, and routing ignores every host's registry row")
	default:
		d.warn("fleet-key", fix,
			"no fleet key, and PI_UNSIGNED_QUEUES=%s: anyone who can write to Valkey can queue forge and folder jobs there and steer routing to those hosts", strings.Join(unsigned, ","))
	}
}

func (d *doctor) triggers() {
	path := d.cfg.TriggersFile
	if path == "" {
		return
	}
	// The reader cron reconcile uses, so doctor and the worker cannot disagree
	// about the file.
	entries, err := cronsync.Authored(path)
	switch {
	case err != nil:
		d.fail("triggers", "fix the file (every problem is listed) or unset PI_TRIGGERS_FILE", "triggers file %s invalid: %s", path, joinLines(err))
	case entries == nil:
		d.warn("triggers", "create it (pi-dispatch init writes an empty one) or unset PI_TRIGGERS_FILE",
			"triggers file %s does not exist: no cron runs, and cron reconcile refuses while a peer holds a cron set", path)
	default:
		d.ok("triggers", "triggers file %s valid (%d cron %s)", path, len(entries), plural(len(entries), "entry", "entries"))
	}
}

func (d *doctor) policyFile(name, variable, what, path string, load func(string) (int, error)) {
	if path == "" {
		return
	}
	n, err := load(path)
	if err != nil {
		fix := "fix the file or unset " + variable + "; the worker refuses to boot with it (exit 2)"
		if errors.Is(err, fs.ErrNotExist) {
			fix = "create it (pi-dispatch init writes scoped-limits.json) or unset " + variable + "; the worker refuses to boot without it"
		}
		d.fail(name, fix, "%s file %s: %v", what, path, err)
		return
	}
	d.ok(name, "%s file %s valid (%d %s)", what, path, n, plural(n, "row", "rows"))
}

// logsDir proves the run records can be written: a temp file created, written
// and removed. A directory that does not exist yet is not created here (doctor
// may run as another user than the worker, and would leave it owned wrongly):
// its nearest existing parent is tested instead, since the worker creates it.
func (d *doctor) logsDir() {
	dir := d.cfg.LogsDir
	fix := "make " + dir + " writable by the worker's user, or point PI_LOGS_DIR elsewhere"
	if rule := check.AbsClean(dir); rule != "" {
		d.fail("logs-dir", "set PI_LOGS_DIR to an absolute path", "logs dir %q: %s", dir, rule)
		return
	}
	probe := dir
	for {
		fi, err := os.Stat(probe)
		if err == nil && fi.IsDir() {
			break
		}
		if err == nil {
			d.fail("logs-dir", fix, "logs dir %s: %s is not a directory", dir, probe)
			return
		}
		if !errors.Is(err, fs.ErrNotExist) {
			d.fail("logs-dir", fix, "logs dir %s: %v", dir, err)
			return
		}
		parent := filepath.Dir(probe)
		if parent == probe {
			d.fail("logs-dir", fix, "logs dir %s: no existing parent", dir)
			return
		}
		probe = parent
	}
	if err := writeProbe(probe); err != nil {
		d.fail("logs-dir", fix, "logs dir %s not writable: %v", dir, err)
		return
	}
	if probe != dir {
		d.ok("logs-dir", "logs dir %s does not exist yet; the worker creates it (%s is writable)", dir, probe)
		return
	}
	d.ok("logs-dir", "logs dir %s writable", dir)
}

func writeProbe(dir string) error {
	f, err := os.CreateTemp(dir, ".pi-dispatch-doctor-*")
	if err != nil {
		return err
	}
	_, werr := f.WriteString("doctor\n")
	cerr := f.Close()
	rerr := os.Remove(f.Name())
	return errors.Join(werr, cerr, rerr)
}

// fleet adds the fleet lines of docs/fleet.md. Every one is gated on
// a peer existing, so a single host's report is unchanged by the fleet layer,
// and every one is a warning: this command runs on one machine and must not
// fail a deployment for a condition that machine cannot fix.
func (d *doctor) fleet(ctx context.Context, valkeyUp, imagePresent bool) {
	const readFix = "check Valkey and run doctor again; until then the fleet checks (peers, zones, image digests) are blind"
	if !valkeyUp {
		d.warn("fleet-registry", readFix, "fleet: host registry not read (Valkey unreachable)")
		return
	}
	if d.deps.Valkey == nil {
		return
	}
	hosts, err := registry.ReadLive(ctx, d.deps.Valkey, d.deps.Timeout)
	if err != nil {
		// Said rather than silently absent: "no peers" and "could not ask" are
		// different facts.
		d.warn("fleet-registry", readFix, "fleet: could not read the host registry: %v", err)
		return
	}
	peers := slices.DeleteFunc(hosts, func(h registry.Host) bool { return h.Name == d.deps.Self })
	if len(peers) == 0 {
		return
	}
	names := []string{d.deps.Self}
	for _, p := range peers {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	d.ok("fleet", "fleet: %d workers (%s)", len(names), strings.Join(names, ", "))

	if !d.cfg.WorkerNameDeclared {
		d.warn("fleet-name",
			"set PI_WORKER_NAME in this host's .env and restart: without it this host's folder work is enqueued where any host can take it",
			"this worker has peers but no PI_WORKER_NAME, so host routing is off here")
	}

	if imagePresent {
		d.fleetImage(ctx, peers)
	}

	zones := map[string]bool{}
	if d.deps.TZ != "" {
		zones[d.deps.TZ] = true
	}
	for _, p := range peers {
		if p.TZ != "" {
			zones[p.TZ] = true
		}
	}
	if len(zones) > 1 {
		list := mapKeys(zones)
		d.warn("fleet-tz",
			"set the same TZ on every host, or give each cron trigger its own tz: a pattern without one is read in each host's zone",
			"hosts disagree about the time zone (%s; here %s), so one cron pattern is two different instants", strings.Join(list, ", "), d.deps.TZ)
	}

	var stale []string
	for _, p := range peers {
		if p.AgeKnown && p.Age > StaleRowAge {
			stale = append(stale, fmt.Sprintf("%s %s", p.Name, p.Age.Round(time.Second)))
		}
	}
	if len(stale) > 0 {
		d.warn("fleet-stale",
			"check that those workers run and that the clocks agree: a stale row is a dead worker or a skewed clock",
			"%d host %s stale by more than %d minutes (%s)", len(stale), plural(len(stale), "row is", "rows are"), int(StaleRowAge/time.Minute), strings.Join(stale, ", "))
	}
}

// fleetImage warns when a peer publishes a job image digest other than ours.
// A warning and never a failure: the digest is the local image id, so two
// independent builds of one Dockerfile legitimately differ.
func (d *doctor) fleetImage(ctx context.Context, peers []registry.Host) {
	pctx, cancel := d.bounded(ctx)
	defer cancel()
	own, err := d.deps.Docker.ImageDigest(pctx, d.cfg.JobImage)
	if err != nil || own == "" {
		return
	}
	var differ []string
	for _, p := range peers {
		if p.ImageDigest != "" && p.ImageDigest != own {
			differ = append(differ, p.Name)
		}
	}
	if len(differ) == 0 {
		return
	}
	d.warn("fleet-image",
		"rebuild or re-pull so every host runs the same image; digests match only when every host pulled one tag from one registry",
		"job image digest differs from %s (here %s %s)", strings.Join(differ, ", "), d.cfg.JobImage, shortDigest(own))
}

// ConfigForDoctor loads the configuration like config.Load. When it is
// invalid, it returns config.Load's error together with a usable
// configuration in which each invalid variable has its default, so doctor
// can still check everything the valid variables name.
func ConfigForDoctor(getenv func(string) string) (config.Config, error) {
	cfg, err := config.Load(getenv)
	if err == nil {
		return cfg, nil
	}
	bad := map[string]bool{}
	var all config.ConfigErrors
	masked := func(k string) string {
		if bad[k] {
			return ""
		}
		return getenv(k)
	}
	// Each pass blanks the variables reported so far; a rule between two
	// variables can report the second only once the first is gone.
	for cur := err; cur != nil; {
		var errs config.ConfigErrors
		if !errors.As(cur, &errs) {
			return config.Default(), err
		}
		grew := false
		for _, ce := range errs {
			if !bad[ce.Var] {
				bad[ce.Var], grew = true, true
				all = append(all, ce)
			}
		}
		if !grew {
			break
		}
		cfg, cur = config.Load(masked)
		if cur == nil {
			all.Sort()
			return cfg, all
		}
	}
	all.Sort()
	return config.Default(), all
}

func joinLines(err error) string {
	return strings.Join(strings.Split(err.Error(), "\n"), "; ")
}

// oneLine keeps a detail to one line of bounded length: an error text from a
// peer or a daemon may carry newlines or be long.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	const limit = 600
	if len(s) > limit {
		cut := limit
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func mapKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}
