package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/registry"
)

// doctorHost is a live Valkey of its own, the real Docker daemon with the
// test job image built, and the environment of a healthy declared host.
func doctorHost(t *testing.T) (*livetest.ValkeyDB, map[string]string) {
	t.Helper()
	db := livetest.Valkey(t)
	dc := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := jobimage.Ensure(ctx, dc, jobimage.TestTag); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(keyFile, []byte("the doctor command's fleet key, 32 bytes+"), 0o600); err != nil {
		t.Fatal(err)
	}
	return db, map[string]string{
		"VALKEY_URL": db.URL, "PI_FLEET_KEY_FILE": keyFile,
		"PI_WORKER_NAME": "doc-a",
		"PI_JOB_IMAGE":   jobimage.TestTag,
		"PI_LOGS_DIR":    t.TempDir(),
		"TZ":             "UTC",
		// Present on every Linux host, so the golden output is the same
		// everywhere.
		"PI_FOLDER_ROOTS": "/usr",
		// The gateway's key for the default provider: doctor checks it is
		// there, never prints it.
		"ANTHROPIC_API_KEY": "sk-doctor-never-printed",
	}
}

// writePeerRow publishes a peer's registry row by hand, as a worker on
// another machine would, beating age ago by the server's clock.
func writePeerRow(t *testing.T, c *redis.Client, name, tz, digest string, age time.Duration) {
	t.Helper()
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, registry.HostKey(name),
		registry.FieldName, name,
		registry.FieldBeatAt, strconv.FormatInt(now.Add(-age).UnixMilli(), 10),
		registry.FieldRoutes, "true",
		registry.FieldTZ, tz,
		registry.FieldImageDigest, digest,
	).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.PExpire(ctx, registry.HostKey(name), 90*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.SAdd(ctx, registry.LiveKey, name).Err(); err != nil {
		t.Fatal(err)
	}
}

var (
	doctorDigestRE = regexp.MustCompile(`sha256:[0-9a-f]{12}`)
	doctorAgeRE    = regexp.MustCompile(`(peer-old) [0-9]+m[0-9]+s`)
)

// normalizeDoctor replaces what differs between runs with placeholders.
func normalizeDoctor(out string, vars map[string]string) string {
	out = strings.NewReplacer(vars["VALKEY_URL"], "$VALKEY_URL", vars["PI_LOGS_DIR"], "$LOGS").Replace(out)
	out = doctorAgeRE.ReplaceAllString(out, "$1 $$AGE")
	return doctorDigestRE.ReplaceAllLiteralString(out, "sha256:$DIGEST")
}

func TestDoctorHealthyHost(t *testing.T) {
	db, vars := doctorHost(t)
	// Our own row (the worker of this host) is not a peer.
	writePeerRow(t, db.Client, "doc-a", "UTC", "", 0)
	r := runCLI(t, vars, "doctor")
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("%+v", r)
	}
	checkGolden(t, "doctor-healthy", normalizeDoctor(r.stdout, vars))
}

func TestDoctorFleetOfThreeWarnsAndPasses(t *testing.T) {
	db, vars := doctorHost(t)
	writePeerRow(t, db.Client, "doc-a", "UTC", "", 0)
	writePeerRow(t, db.Client, "peer-tokyo", "Asia/Tokyo", "sha256:"+strings.Repeat("0", 64), 0)
	writePeerRow(t, db.Client, "peer-old", "UTC", "", 6*time.Minute)
	r := runCLI(t, vars, "doctor")
	if r.code != exitOK {
		t.Fatalf("fleet warnings must not fail doctor: %+v", r)
	}
	if !strings.Contains(r.stdout, "⚠ hosts disagree about the time zone (Asia/Tokyo, UTC; here UTC)") {
		t.Fatalf("no zone warning naming both zones:\n%s", r.stdout)
	}
	checkGolden(t, "doctor-fleet", normalizeDoctor(r.stdout, vars))
}

func TestDoctorBadConfigAndFiles(t *testing.T) {
	_, vars := doctorHost(t)
	dir := t.TempDir()
	triggers := filepath.Join(dir, "triggers.json")
	if err := os.WriteFile(triggers, []byte(`{"triggers": [], "extra": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	vars["PI_CONCURRENCY"] = "0"
	vars["PI_JOB_MEMORY"] = "lots"
	vars["PI_TRIGGERS_FILE"] = triggers
	vars["PI_SCOPED_LIMITS_FILE"] = filepath.Join(dir, "absent.json")
	r := runCLI(t, vars, "doctor")
	if r.code != exitFailure {
		t.Fatalf("%+v", r)
	}
	for _, want := range []string{
		"✓ Valkey reachable at ", // the other checks still run
		"✓ job image " + jobimage.TestTag + " present",
		"✗ PI_CONCURRENCY=\"0\": must be between 1 and 256\n    fix: fix PI_CONCURRENCY in .env",
		"✗ PI_JOB_MEMORY=\"lots\": ",
		"✗ triggers file " + triggers + " invalid: extra: ",
		"✗ scoped limits file " + filepath.Join(dir, "absent.json") + ": ",
		"4 problems, 0 warnings\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestDoctorRefusesArguments(t *testing.T) {
	if r := runCLI(t, nil, "doctor", "--fix"); r.code != exitUsage {
		t.Fatalf("%+v", r)
	}
	if r := runCLI(t, nil, "doctor", "extra"); r.code != exitUsage || !strings.Contains(r.stderr, "unexpected argument") {
		t.Fatalf("%+v", r)
	}
}

// doctor warns, with the fix, when no folder root is set, and when a root
// is not a folder here.
func TestDoctorFolderRootsCheck(t *testing.T) {
	c := folderRootsCheck(config.Config{})
	if c.Status != operator.CheckWarn || !strings.Contains(c.Detail, "PI_FOLDER_ROOTS is not set") || !strings.Contains(c.Fix, "pi-dispatch init") {
		t.Fatalf("unset: %+v", c)
	}
	c = folderRootsCheck(config.Config{Settings: dispatch.Settings{FolderRoots: []string{filepath.Join(t.TempDir(), "gone")}}})
	if c.Status != operator.CheckWarn || !strings.Contains(c.Detail, "not directories") {
		t.Fatalf("missing: %+v", c)
	}
	if c = folderRootsCheck(config.Config{Settings: dispatch.Settings{FolderRoots: []string{t.TempDir()}}}); c.Status != operator.CheckOK {
		t.Fatalf("set: %+v", c)
	}
}
