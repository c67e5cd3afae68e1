package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/runner"
)

// dollarWindow reads the day window: settled spend plus live reservations.
func dollarWindow(t *testing.T, d *fleetstate.Dollars) (used, capM int64) {
	ws, err := d.Windows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.Name == "day" {
			return w.SpentMicros + w.ReservedMicros, w.CapMicros
		}
	}
	t.Fatalf("no day window in %+v", ws)
	return 0, 0
}

// Three workers race 16 jobs for a daily dollar window that holds five
// jobs' caps: the window never holds more than its cap, and no more than
// five containers ever run at once.
func TestDollarWindowHoldsAcrossThreeWorkers(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	dc := livetest.Docker(t)
	db := livetest.Valkey(t)
	limits := map[string]string{"PI_MAX_COST_USD": "1", "PI_DAILY_COST_USD": "5", "PI_CONCURRENCY": "4"}
	var names []string
	var dirs []string
	for i := range 3 {
		name := uniqueName("usd"+string(rune('a'+i)), db)
		env := map[string]string{"PI_WORKER_NAME": name}
		for k, v := range limits {
			env[k] = v
		}
		w := bootWorker(t, testEnv(t, db.URL, env), dispatch.Tuning{})
		names = append(names, name)
		dirs = append(dirs, w.cfg.LogsDir)
	}
	d := fleetstate.NewDollars(db.Client, fleetstate.DollarsConfig{DailyMicros: 5_000_000})
	router := newRouter(t, db)
	waitHosts(t, db.Client, nil, names...)
	ids := map[string]bool{}
	for i := range 16 {
		id := uniqueName("race"+string(rune('a'+i)), db)
		ids[id] = true
		if _, err := router.EnqueueForge(context.Background(), enqueue.ForgeDelivery{JobID: id, Job: forgeJob("acme/race", "JOB_SLEEP=3s")}); err != nil {
			t.Fatal(err)
		}
	}
	var maxUsed int64
	done := func() bool {
		used, capM := dollarWindow(t, d)
		maxUsed = max(maxUsed, used)
		if used > capM {
			t.Fatalf("the day window holds %d micros, past its cap %d", used, capM)
		}
		for id := range ids {
			if !recordExists(dirs, id) {
				return false
			}
		}
		return true
	}
	_, maxRunning := sample(t, dc, names, ids, 4*time.Minute, done)
	if maxRunning > 5 || maxRunning < 2 {
		t.Fatalf("%d containers ran at once, want between 2 and 5", maxRunning)
	}
	refused := 0
	for id := range ids {
		rec, _ := readRecord(t, dirs, id)
		switch {
		case rec.Outcome == jobs.OutcomePolicy && rec.Reason == jobs.ReasonDollarCap:
			refused++
		case rec.Outcome != jobs.OutcomeCompleted:
			t.Fatalf("job %s: %+v", id, rec)
		}
	}
	t.Logf("16 jobs: %d refused dollar-cap, at most %d running, the window peaked at $%s of $5", refused, maxRunning, jobs.FormatUSD(maxUsed))
	if maxUsed < 2_000_000 {
		t.Fatalf("the window never held more than $%s: the race did not race", jobs.FormatUSD(maxUsed))
	}
	// Each job settles once its handling ends, a moment after its record.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		used, _ := dollarWindow(t, d)
		if used == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("$%s still held 15s after every job was recorded (they spent nothing)", jobs.FormatUSD(used))
		}
	}
}

// A worker killed mid-job never settles its reservation; the reservation
// lapses by the job's timeout and the window is whole again.
func TestKilledWorkerReleasesItsReservationByTheJobTimeout(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	bin := workerBinary(t)
	dc := livetest.Docker(t)
	db := livetest.Valkey(t)
	name := uniqueName("usdkill", db)
	const timeout = 20 * time.Second
	env := processEnv(map[string]string{
		"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": name, "PI_JOB_IMAGE": jobimage.TestTag,
		"PI_LOGS_DIR": t.TempDir(), "PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "0.5",
		"PI_JOB_TIMEOUT": timeout.String(), "PI_MAX_COST_USD": "2", "PI_DAILY_COST_USD": "10",
		"TMPDIR": t.TempDir(),
	})
	p := startProcess(t, bin, env)
	p.waitEvent(t, "worker_started", 30*time.Second)
	jobID := uniqueName("usd-kill", db)
	if _, err := newRouter(t, db).EnqueueForge(context.Background(), enqueue.ForgeDelivery{JobID: jobID, Job: forgeJob("acme/kill", "JOB_SLEEP=300s")}); err != nil {
		t.Fatal(err)
	}
	d := fleetstate.NewDollars(db.Client, fleetstate.DollarsConfig{DailyMicros: 10_000_000})
	deadline := time.Now().Add(60 * time.Second)
	var reservedAt time.Time
	for reservedAt.IsZero() {
		if used, _ := dollarWindow(t, d); used == 2_000_000 {
			reservedAt = time.Now()
		} else if time.Now().After(deadline) {
			t.Fatalf("the job never reserved its $2 (window holds %d micros):\n%s", used, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitRunning(t, dc, jobID, 60*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.exit(t, 10*time.Second)
	t.Cleanup(func() {
		for _, c := range containers(t, dc, runner.LabelJob, jobID) {
			_, _ = dc.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true})
		}
	})
	for {
		used, _ := dollarWindow(t, d)
		if used == 0 {
			break
		}
		if since := time.Since(reservedAt); since > timeout+2*time.Second {
			t.Fatalf("the dead worker's $%s is still held %s after it was reserved (job timeout %s)", jobs.FormatUSD(used), since.Round(time.Millisecond), timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the reservation lapsed %s after it was taken (job timeout %s)", time.Since(reservedAt).Round(100*time.Millisecond), timeout)
	_ = fleet.SharedQueue
}

// waitRunning waits until a container of jobID runs.
func waitRunning(t *testing.T, dc *client.Client, jobID string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, c := range containers(t, dc, runner.LabelJob, jobID) {
			if c.State == "running" {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no running container of %s after %s", jobID, timeout)
}
