package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/envfile"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/recordtest"
	"github.com/pidispatch/pidispatch/internal/testkit/stacktest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/registry"
	"github.com/pidispatch/pidispatch/stack"
)

// The settings init writes hold against a party that can write to Valkey
// but holds no key: its fake registry rows receive none of 100 routed
// deliveries, and its folder and forge jobs, written as raw BullMQ keys,
// are refused job-unsigned before anything is spent (no container, no
// token), while the job the CLI's producer signs runs.
func TestInitDefaultsHoldAgainstAValkeyWriter(t *testing.T) {
	db := livetest.Valkey(t)
	dc := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := jobimage.Ensure(ctx, dc, jobimage.TestTag); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if r := runCLI(t, nil, "init", "--dir", dir); r.code != exitOK {
		t.Fatalf("init: %+v", r)
	}
	entries, err := envfile.ParseFile(filepath.Join(dir, ".env"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, en := range entries {
		vars[en.Key] = en.Value
	}
	// Only what this machine needs changed: its Valkey, image, folders, records.
	name := "init-host"
	for k, v := range map[string]string{"VALKEY_URL": db.URL, "PI_WORKER_NAME": name, "PI_JOB_IMAGE": jobimage.TestTag,
		"PI_LOGS_DIR": t.TempDir(), "PI_FOLDER_ROOTS": os.TempDir(), "PI_CONTAINER_USER": "root", "PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "0.5",
		"PI_SCOPED_LIMITS_FILE": filepath.Join(dir, "scoped-limits.json")} {
		vars[k] = v
	}
	cfg, err := config.Load(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.FleetKey.IsSet() || len(cfg.UnsignedQueues) != 0 {
		t.Fatalf("init's settings: key %v, unsigned %q", cfg.FleetKey.IsSet(), cfg.UnsignedQueues)
	}

	// Routing: nine fake rows claim the profile every delivery needs.
	caps := capabilities.Serialize(capabilities.Tokens([]string{"gh"}, nil))
	now, err := db.Client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 9 {
		fake := fmt.Sprintf("fake-%d", i)
		if err := db.Client.HSet(ctx, registry.HostKey(fake), registry.FieldName, fake, registry.FieldBeatAt, strconv.FormatInt(now.UnixMilli(), 10),
			registry.FieldRoutes, "true", registry.FieldCaps, caps).Err(); err != nil {
			t.Fatal(err)
		}
		if err := db.Client.SAdd(ctx, registry.LiveKey, fake).Err(); err != nil {
			t.Fatal(err)
		}
	}
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{FleetKey: cfg.FleetKey, UnsignedQueues: cfg.UnsignedQueues})
	if err != nil {
		t.Fatal(err)
	}
	router := enqueue.NewRouter(p, enqueue.RouterConfig{})
	captured := 0
	for i := range 100 {
		e, err := router.EnqueueForge(ctx, enqueue.ForgeDelivery{JobID: fmt.Sprintf("gh-route-%d", i),
			Job: jobs.Job{Kind: jobs.KindForge, Repo: "acme/widgets", Flow: "fix", Task: "t", SecretsProfile: "gh"}})
		if err == nil && strings.HasPrefix(e.Queue, fleet.HostQueuePrefix+"fake-") {
			captured++
		}
	}
	if captured != 0 {
		t.Fatalf("%d of 100 routed deliveries went to fake rows, want 0", captured)
	}

	// The worker: raw jobs of a party without the key are refused.
	s, err := stack.Build(ctx, cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)), dispatch.Tuning{JobsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	stacktest.Run(t, s)
	hostQueue := fleet.HostQueueName(name)
	rawAdd := func(queueName, id, data string) {
		t.Helper()
		livetest.RawJob(t, db.Client, queueName, id, data)
	}
	folder := t.TempDir()
	rawAdd(hostQueue, "raw-folder", fmt.Sprintf(`{"kind":"local","folder":%q,"flow":"fix","task":"JOB_WRITE_FILE=pwned"}`, folder))
	rawAdd(fleet.SharedQueue, "raw-forge", `{"kind":"forge","forge":"github","repo":"someone/else","number":1,"flow":"fix","task":"t"}`)
	signed, err := p.EnqueueLocal(ctx, jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "JOB_PRINT_EXIT_LINE=1"})
	if err == nil && signed.Queue != fleet.SharedQueue {
		t.Fatalf("an undeclared producer queued on %s", signed.Queue)
	}
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]jobs.Reason{"raw-folder": jobs.ReasonJobUnsigned, "raw-forge": jobs.ReasonJobUnsigned, signed.JobID: jobs.ReasonCompleted} {
		r := recordtest.Wait(t, cfg.LogsDir, id, 90*time.Second)
		if r.Reason != want {
			t.Errorf("%s: %s/%s, want %s", id, r.Outcome, r.Reason, want)
		}
	}
	if _, err := os.Stat(filepath.Join(folder, "pwned")); !os.IsNotExist(err) {
		t.Fatalf("the raw folder job wrote into its folder: %v", err)
	}
}
