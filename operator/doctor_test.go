package operator_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/registry"
	"github.com/pidispatch/pidispatch/valkey"
)

// fakeDoctorDocker is a Docker daemon as doctor sees it.
type fakeDoctorDocker struct {
	pingErr     error
	present     bool
	presentErr  error
	digest      string
	digestCalls atomic.Int32
}

var _ operator.DoctorDocker = (*fakeDoctorDocker)(nil)

func (f *fakeDoctorDocker) Ping(context.Context) error { return f.pingErr }
func (f *fakeDoctorDocker) ImagePresent(context.Context, string) (bool, error) {
	return f.present, f.presentErr
}
func (f *fakeDoctorDocker) ImageDigest(context.Context, string) (string, error) {
	f.digestCalls.Add(1)
	if !f.present {
		return "", errors.New("no such image")
	}
	return f.digest, nil
}

const (
	doctorDigestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	doctorDigestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// doctorConfig is a valid configuration named self, declared, logging to a
// fresh folder.
func doctorConfig(t *testing.T, self string) config.Config {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(keyFile, []byte("the doctor tests' fleet key, 32 bytes or more"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(func(k string) string {
		return map[string]string{
			"PI_FLEET_KEY_FILE": keyFile,
			"PI_WORKER_NAME":    self,
			"PI_LOGS_DIR":       t.TempDir(),
			"PI_JOB_IMAGE":      "pi-job:test",
			"ANTHROPIC_API_KEY": "sk-doctor-test",
		}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// doctorPeer writes a peer's registry row by hand, beating age ago by the
// server's clock.
func doctorPeer(t *testing.T, c *redis.Client, name, tz, digest string, age time.Duration) {
	t.Helper()
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	beat := now.Add(-age).UnixMilli()
	if err := c.HSet(ctx, registry.HostKey(name),
		registry.FieldName, name,
		registry.FieldBeatAt, strconv.FormatInt(beat, 10),
		registry.FieldRoutes, "true",
		registry.FieldTZ, tz,
		registry.FieldImageDigest, digest,
	).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.PExpire(ctx, registry.HostKey(name), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.SAdd(ctx, registry.LiveKey, name).Err(); err != nil {
		t.Fatal(err)
	}
}

func findChecks(checks []operator.Check, name string) []operator.Check {
	var out []operator.Check
	for _, c := range checks {
		if c.Name == name {
			out = append(out, c)
		}
	}
	return out
}

func oneCheck(t *testing.T, checks []operator.Check, name string) operator.Check {
	t.Helper()
	got := findChecks(checks, name)
	if len(got) != 1 {
		t.Fatalf("want exactly one %s check, got %d in %+v", name, len(got), checks)
	}
	return got[0]
}

func TestDoctorHealthySingleHost(t *testing.T) {
	db := livetest.Valkey(t)
	cfg := doctorConfig(t, "doc-a")
	docker := &fakeDoctorDocker{present: true, digest: doctorDigestA}
	// Our own row is not a peer: no fleet line.
	doctorPeer(t, db.Client, "doc-a", "Asia/Tokyo", doctorDigestB, 0)

	checks := operator.Doctor(context.Background(), cfg, operator.DoctorDeps{Valkey: db.Client, Docker: docker, TZ: "UTC"})
	if operator.Failed(checks) {
		t.Fatalf("healthy host failed: %+v", checks)
	}
	var names []string
	for _, c := range checks {
		if c.Status != operator.CheckOK || c.Fix != "" {
			t.Errorf("not ok: %+v", c)
		}
		names = append(names, c.Name)
	}
	if got, want := strings.Join(names, ","), "valkey,docker,job-image,config,fleet-key,gateway-key,pricing,logs-dir"; got != want {
		t.Fatalf("checks %s, want %s", got, want)
	}
	if n := docker.digestCalls.Load(); n != 0 {
		t.Fatalf("image digest read %d times without a peer to compare with", n)
	}
}

func TestDoctorFleetLinesWarnNeverFail(t *testing.T) {
	db := livetest.Valkey(t)
	cfg := doctorConfig(t, "doc-a")
	docker := &fakeDoctorDocker{present: true, digest: doctorDigestA}
	doctorPeer(t, db.Client, "doc-a", "UTC", doctorDigestA, 0)
	doctorPeer(t, db.Client, "peer-tokyo", "Asia/Tokyo", doctorDigestB, 0)
	doctorPeer(t, db.Client, "peer-old", "UTC", doctorDigestA, 6*time.Minute)

	checks := operator.Doctor(context.Background(), cfg, operator.DoctorDeps{Valkey: db.Client, Docker: docker, TZ: "UTC"})
	if operator.Failed(checks) {
		t.Fatalf("fleet differences must never fail: %+v", checks)
	}
	fleet := oneCheck(t, checks, "fleet")
	if fleet.Status != operator.CheckOK || fleet.Detail != "fleet: 3 workers (doc-a, peer-old, peer-tokyo)" {
		t.Errorf("fleet: %+v", fleet)
	}
	tz := oneCheck(t, checks, "fleet-tz")
	if tz.Status != operator.CheckWarn || !strings.Contains(tz.Detail, "Asia/Tokyo, UTC") || tz.Fix == "" {
		t.Errorf("fleet-tz: %+v", tz)
	}
	img := oneCheck(t, checks, "fleet-image")
	if img.Status != operator.CheckWarn || !strings.Contains(img.Detail, "differs from peer-tokyo (") || strings.Contains(img.Detail, "peer-old") {
		t.Errorf("fleet-image: %+v", img)
	}
	stale := oneCheck(t, checks, "fleet-stale")
	if stale.Status != operator.CheckWarn || !strings.Contains(stale.Detail, "peer-old") || strings.Contains(stale.Detail, "peer-tokyo") {
		t.Errorf("fleet-stale: %+v", stale)
	}
	if got := findChecks(checks, "fleet-name"); len(got) != 0 {
		t.Errorf("a declared host got %+v", got)
	}
}

func TestDoctorPeersWithoutDeclaredName(t *testing.T) {
	db := livetest.Valkey(t)
	cfg, err := config.Load(func(k string) string {
		return map[string]string{"PI_LOGS_DIR": t.TempDir()}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	doctorPeer(t, db.Client, "someone-else", "UTC", "", 0)
	checks := operator.Doctor(context.Background(), cfg, operator.DoctorDeps{
		Valkey: db.Client, Docker: &fakeDoctorDocker{present: true, digest: doctorDigestA}, TZ: "UTC",
	})
	name := oneCheck(t, checks, "fleet-name")
	if name.Status != operator.CheckWarn || !strings.Contains(name.Fix, "PI_WORKER_NAME") {
		t.Fatalf("fleet-name: %+v", name)
	}
	if len(findChecks(checks, "fleet-tz")) != 0 || len(findChecks(checks, "fleet-image")) != 0 {
		t.Fatalf("same zone and a peer without a digest must not warn: %+v", checks)
	}
}

func TestDoctorDockerDownSkipsImage(t *testing.T) {
	db := livetest.Valkey(t)
	doctorPeer(t, db.Client, "peer", "UTC", doctorDigestB, 0)
	docker := &fakeDoctorDocker{pingErr: errors.New("connection refused"), present: true, digest: doctorDigestA}
	checks := operator.Doctor(context.Background(), doctorConfig(t, "doc-a"), operator.DoctorDeps{Valkey: db.Client, Docker: docker, TZ: "UTC"})
	if c := oneCheck(t, checks, "docker"); c.Status != operator.CheckFail || !strings.Contains(c.Detail, "connection refused") || c.Fix == "" {
		t.Errorf("docker: %+v", c)
	}
	if c := oneCheck(t, checks, "job-image"); c.Status != operator.CheckWarn || !strings.Contains(c.Detail, "not checked") {
		t.Errorf("job-image: %+v", c)
	}
	if docker.digestCalls.Load() != 0 || len(findChecks(checks, "fleet-image")) != 0 {
		t.Errorf("digest compared with Docker down: %+v", checks)
	}
	if !operator.Failed(checks) {
		t.Error("Docker down must fail doctor")
	}
}

func TestDoctorImageMissingFailsWithFix(t *testing.T) {
	db := livetest.Valkey(t)
	checks := operator.Doctor(context.Background(), doctorConfig(t, "doc-a"), operator.DoctorDeps{Valkey: db.Client, Docker: &fakeDoctorDocker{}, TZ: "UTC"})
	c := oneCheck(t, checks, "job-image")
	if c.Status != operator.CheckFail || !strings.Contains(c.Detail, "pi-job:test is not on this host") ||
		!strings.Contains(c.Fix, "docker pull <registry>/pi-job:test && docker tag <registry>/pi-job:test pi-job:test") {
		t.Fatalf("job-image: %+v", c)
	}
	if !operator.Failed(checks) {
		t.Fatal("a missing image must fail doctor")
	}
}

func TestDoctorImageInspectErrorFails(t *testing.T) {
	db := livetest.Valkey(t)
	docker := &fakeDoctorDocker{presentErr: errors.New("daemon hiccup")}
	checks := operator.Doctor(context.Background(), doctorConfig(t, "doc-a"), operator.DoctorDeps{Valkey: db.Client, Docker: docker, TZ: "UTC"})
	if c := oneCheck(t, checks, "job-image"); c.Status != operator.CheckFail || !strings.Contains(c.Detail, "daemon hiccup") {
		t.Fatalf("job-image: %+v", c)
	}
}

func TestImageFix(t *testing.T) {
	for image, want := range map[string]string{
		"ghcr.io/acme/pi-job:1":  "build or pull it: docker pull ghcr.io/acme/pi-job:1",
		"localhost:5000/pi-job":  "build or pull it: docker pull localhost:5000/pi-job",
		"acme/pi-job:latest":     "build or pull it: docker pull <registry>/acme/pi-job:latest && docker tag <registry>/acme/pi-job:latest acme/pi-job:latest (or docker build -t acme/pi-job:latest <agent image folder>)",
		"pi-job:latest":          "build or pull it: docker pull <registry>/pi-job:latest && docker tag <registry>/pi-job:latest pi-job:latest (or docker build -t pi-job:latest <agent image folder>)",
		"localhost/pi-job:local": "build or pull it: docker pull localhost/pi-job:local",
	} {
		if got := operator.ImageFix(image); got != want {
			t.Errorf("ImageFix(%q) = %q, want %q", image, got, want)
		}
	}
}

func TestDoctorValkeyDownIsSaidFast(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: time.Minute, MaxRetries: -1})
	defer rc.Close()
	start := time.Now()
	checks := operator.Doctor(context.Background(), doctorConfig(t, "doc-a"), operator.DoctorDeps{
		Valkey: rc, Docker: &fakeDoctorDocker{present: true}, TZ: "UTC", Timeout: 500 * time.Millisecond,
	})
	// A hang-catching bound, 20x the checks' own timeout: without it a dead
	// Valkey would hold each check for the client's dial timeout.
	if time.Since(start) > 10*time.Second {
		t.Fatalf("doctor took %s with Valkey down", time.Since(start))
	}
	if c := oneCheck(t, checks, "valkey"); c.Status != operator.CheckFail || !strings.Contains(c.Fix, "VALKEY_URL") {
		t.Errorf("valkey: %+v", c)
	}
	if c := oneCheck(t, checks, "fleet-registry"); c.Status != operator.CheckWarn || !strings.Contains(c.Detail, "not read") {
		t.Errorf("fleet-registry: %+v", c)
	}
}

// A Valkey that refuses the password is reachable: doctor names the
// password fix, not "start Valkey".
func TestDoctorRefusedPasswordIsSaid(t *testing.T) {
	srv := livetest.StartServer(t)
	if err := srv.Client().ConfigSet(context.Background(), "requirepass", "pw1").Err(); err != nil {
		t.Fatal(err)
	}
	for _, pw := range []string{"", "wrong"} {
		rc, err := valkey.NewClient(srv.URL(), valkey.Options{Password: pw, OneShot: true})
		if err != nil {
			t.Fatal(err)
		}
		checks := operator.Doctor(context.Background(), doctorConfig(t, "doc-a"), operator.DoctorDeps{
			Valkey: rc, Docker: &fakeDoctorDocker{present: true}, TZ: "UTC", Timeout: time.Second,
		})
		_ = rc.Close()
		c := oneCheck(t, checks, "valkey")
		if c.Status != operator.CheckFail || c.Fix != "set VALKEY_PASSWORD or put the password in VALKEY_URL" ||
			!strings.Contains(c.Detail, "refused authentication") || strings.Contains(c.Detail, "unreachable") {
			t.Errorf("password %q: %+v", pw, c)
		}
	}
}

func TestDoctorRegistryUnreadableIsSaid(t *testing.T) {
	db := livetest.Valkey(t)
	// A ping answers, the registry read does not: a wrong type under the
	// live set's key makes the read script fail.
	if err := db.Client.Set(context.Background(), registry.LiveKey, "junk", 0).Err(); err != nil {
		t.Fatal(err)
	}
	checks := operator.Doctor(context.Background(), doctorConfig(t, "doc-a"), operator.DoctorDeps{
		Valkey: db.Client, Docker: &fakeDoctorDocker{present: true}, TZ: "UTC",
	})
	c := oneCheck(t, checks, "fleet-registry")
	if c.Status != operator.CheckWarn || !strings.Contains(c.Detail, "could not read the host registry") {
		t.Fatalf("fleet-registry: %+v", c)
	}
	if operator.Failed(checks) {
		t.Fatalf("an unreadable registry is a warning: %+v", checks)
	}
}

func TestDoctorNilDepsFailNotPanic(t *testing.T) {
	checks := operator.Doctor(context.Background(), doctorConfig(t, "doc-a"), operator.DoctorDeps{TZ: "UTC"})
	for _, name := range []string{"valkey", "docker"} {
		if c := oneCheck(t, checks, name); c.Status != operator.CheckFail {
			t.Errorf("%s: %+v", name, c)
		}
	}
}

func TestDoctorConfigErrorsOnePerVariable(t *testing.T) {
	env := map[string]string{
		"PI_CONCURRENCY": "lots",
		"PI_JOB_TIMEOUT": "90",
		"PI_JOB_IMAGE":   "pi-job:kept",
		"PI_LOGS_DIR":    t.TempDir(),
	}
	cfg, err := operator.ConfigForDoctor(func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("invalid configuration accepted")
	}
	if cfg.JobImage != "pi-job:kept" || cfg.LogsDir != env["PI_LOGS_DIR"] || cfg.Concurrency != config.DefaultConcurrency || cfg.JobTimeout != config.DefaultJobTimeout {
		t.Fatalf("best-effort config: %v", cfg)
	}
	db := livetest.Valkey(t)
	checks := operator.Doctor(context.Background(), cfg, operator.DoctorDeps{
		Valkey: db.Client, Docker: &fakeDoctorDocker{present: true}, ConfigErr: err, TZ: "UTC",
	})
	got := findChecks(checks, "config")
	if len(got) != 2 {
		t.Fatalf("want one config line per bad variable, got %+v", got)
	}
	for i, v := range []string{"PI_CONCURRENCY", "PI_JOB_TIMEOUT"} {
		if got[i].Status != operator.CheckFail || !strings.HasPrefix(got[i].Detail, v+"=") || !strings.Contains(got[i].Fix, v) {
			t.Errorf("config line %d: %+v", i, got[i])
		}
	}
	if c := oneCheck(t, checks, "valkey"); c.Status != operator.CheckOK {
		t.Errorf("the other checks must still run: %+v", c)
	}
}

func TestConfigForDoctorDependentRule(t *testing.T) {
	// PI_WAIT_MAX_MS below the interval is reported once the interval is
	// valid; both are replaced by defaults in the returned configuration.
	env := map[string]string{"PI_WAIT_INTERVAL_MS": "10", "PI_WAIT_MAX_MS": "40000", "PI_DAILY_CAP": "7"}
	cfg, err := operator.ConfigForDoctor(func(k string) string { return env[k] })
	var errs config.ConfigErrors
	if !errors.As(err, &errs) || len(errs) == 0 || errs[0].Var != "PI_WAIT_INTERVAL_MS" {
		t.Fatalf("err %v", err)
	}
	if cfg.DailyCap != 7 || cfg.WaitInterval != config.DefaultWaitInterval {
		t.Fatalf("cfg %v", cfg)
	}
	if cfg.Validate() != nil {
		t.Fatalf("best-effort config invalid: %v", cfg.Validate())
	}
	good, err := operator.ConfigForDoctor(func(k string) string { return map[string]string{"PI_DAILY_CAP": "9"}[k] })
	if err != nil || good.DailyCap != 9 {
		t.Fatalf("valid env: %v %v", good, err)
	}
}

func TestDoctorPolicyFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := doctorConfig(t, "doc-a")
	cfg.TriggersFile = write("triggers.json", `{"triggers": [{"on": {"type": "cron", "id": "x", "pattern": "bad"}, "run": {}}]}`)
	cfg.ScopedLimitsFile = filepath.Join(dir, "absent-limits.json")
	cfg.PauseWindowsFile = write("pause.json", `{"windows": [{"scope": "*", "from": "22:00", "to": "06:00"}]}`)
	db := livetest.Valkey(t)
	checks := operator.Doctor(context.Background(), cfg, operator.DoctorDeps{Valkey: db.Client, Docker: &fakeDoctorDocker{present: true}, TZ: "UTC"})

	if c := oneCheck(t, checks, "triggers"); c.Status != operator.CheckFail || !strings.Contains(c.Detail, "on.pattern") || strings.Contains(c.Detail, "\n") {
		t.Errorf("triggers: %+v", c)
	}
	if c := oneCheck(t, checks, "scoped-limits"); c.Status != operator.CheckFail || !strings.Contains(c.Fix, "create it") {
		t.Errorf("scoped-limits: %+v", c)
	}
	if c := oneCheck(t, checks, "pause-windows"); c.Status != operator.CheckOK || !strings.Contains(c.Detail, "(1 row)") {
		t.Errorf("pause-windows: %+v", c)
	}

	cfg.TriggersFile = write("good.json", `{"triggers": [{"on": {"type": "cron", "id": "n", "pattern": "0 3 * * *"}, "run": {"kind": "local", "folder": "/srv/x", "flow": "f", "task": "t"}}]}`)
	cfg.ScopedLimitsFile = write("limits.json", `{"version": 1, "limits": [{"scope": "acme/web", "day": 3}]}`)
	checks = operator.Doctor(context.Background(), cfg, operator.DoctorDeps{Valkey: db.Client, Docker: &fakeDoctorDocker{present: true}, TZ: "UTC"})
	if c := oneCheck(t, checks, "triggers"); c.Status != operator.CheckOK || !strings.Contains(c.Detail, "(1 cron entry)") {
		t.Errorf("triggers: %+v", c)
	}
	if c := oneCheck(t, checks, "scoped-limits"); c.Status != operator.CheckOK {
		t.Errorf("scoped-limits: %+v", c)
	}

	cfg.TriggersFile = filepath.Join(dir, "no-triggers.json")
	checks = operator.Doctor(context.Background(), cfg, operator.DoctorDeps{Valkey: db.Client, Docker: &fakeDoctorDocker{present: true}, TZ: "UTC"})
	if c := oneCheck(t, checks, "triggers"); c.Status != operator.CheckWarn || !strings.Contains(c.Detail, "does not exist") {
		t.Errorf("absent triggers: %+v", c)
	}
}

func TestDoctorLogsDir(t *testing.T) {
	db := livetest.Valkey(t)
	deps := operator.DoctorDeps{Valkey: db.Client, Docker: &fakeDoctorDocker{present: true}, TZ: "UTC"}
	cfg := doctorConfig(t, "doc-a")

	// Not created by doctor: the worker, as its own user, creates it.
	cfg.LogsDir = filepath.Join(t.TempDir(), "not", "yet")
	c := oneCheck(t, operator.Doctor(context.Background(), cfg, deps), "logs-dir")
	if c.Status != operator.CheckOK || !strings.Contains(c.Detail, "does not exist yet") {
		t.Errorf("absent dir: %+v", c)
	}
	if _, err := os.Stat(cfg.LogsDir); !os.IsNotExist(err) {
		t.Errorf("doctor created %s: %v", cfg.LogsDir, err)
	}

	// Under a regular file: never writable.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.LogsDir = filepath.Join(file, "logs")
	if c := oneCheck(t, operator.Doctor(context.Background(), cfg, deps), "logs-dir"); c.Status != operator.CheckFail || !strings.Contains(c.Detail, "not a directory") {
		t.Errorf("dir under a file: %+v", c)
	}

	// An existing dir is written to and left as it was.
	cfg.LogsDir = t.TempDir()
	if c := oneCheck(t, operator.Doctor(context.Background(), cfg, deps), "logs-dir"); c.Status != operator.CheckOK || !strings.HasSuffix(c.Detail, "writable") {
		t.Errorf("existing dir: %+v", c)
	}
	if left, _ := os.ReadDir(cfg.LogsDir); len(left) != 0 {
		t.Errorf("doctor left %v in the logs dir", left)
	}
}

func TestCheckStatusString(t *testing.T) {
	for s, want := range map[operator.CheckStatus]string{operator.CheckOK: "ok", operator.CheckWarn: "warn", operator.CheckFail: "fail", 7: "CheckStatus(7)"} {
		if s.String() != want {
			t.Errorf("%d: %s", int(s), s)
		}
	}
}

// doctor says what the signing setup gives away: a host without a key, or
// with queues opted in to unsigned jobs, is warned with the fix.
func TestDoctorFleetKey(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mutate   func(*config.Config)
		status   operator.CheckStatus
		contains string
	}{
		{"key", func(*config.Config) {}, operator.CheckOK, "signed"},
		{"key and unsigned queues", func(c *config.Config) { c.UnsignedQueues = []string{"pi-jobs"} }, operator.CheckWarn, "pi-jobs take unsigned jobs"},
		{"no key", func(c *config.Config) { c.FleetKey, c.FleetKeyFile = fleet.Key{}, "" }, operator.CheckWarn, "every job but a cron run is refused"},
		{"no key, opted in", func(c *config.Config) { c.FleetKey, c.FleetKeyFile, c.UnsignedQueues = fleet.Key{}, "", []string{"*"} }, operator.CheckWarn, "anyone who can write to Valkey"},
	} {
		cfg := doctorConfig(t, "doc-k")
		tc.mutate(&cfg)
		c := oneCheck(t, operator.Doctor(context.Background(), cfg, operator.DoctorDeps{Docker: &fakeDoctorDocker{present: true, digest: doctorDigestA}, TZ: "UTC"}), "fleet-key")
		if c.Status != tc.status || !strings.Contains(c.Detail, tc.contains) {
			t.Errorf("%s: %+v, want %v with %q", tc.name, c, tc.status, tc.contains)
		}
		if tc.status == operator.CheckWarn && !strings.Contains(c.Fix, "PI_") {
			t.Errorf("%s: no fix named: %+v", tc.name, c)
		}
	}
}
