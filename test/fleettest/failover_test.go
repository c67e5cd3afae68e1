package fleettest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/valkey"
)

// sentinelMaster is the name the scenario's sentinel monitors.
const sentinelMaster = "mymaster"

// sentinel is a private redis-sentinel process.
type sentinel struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// startSentinel runs a redis-sentinel that monitors primary as
// sentinelMaster with quorum 1, declares it down after one second and
// retries a failover after five, and waits until it answers.
func startSentinel(t *testing.T, dir string, primary *redisServer) *sentinel {
	t.Helper()
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		t.Fatalf("redis-sentinel binary: %v", err)
	}
	port := freePort(t)
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\n"+
		"sentinel monitor %[5]s 127.0.0.1 %[4]d 1\n"+
		"sentinel down-after-milliseconds %[5]s 1000\n"+
		"sentinel failover-timeout %[5]s 5000\n",
		port, dir, filepath.Join(dir, "sentinel.log"), primary.port, sentinelMaster)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf)
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-sentinel: %v", err)
	}
	sn := &sentinel{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(sn.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-sn.done
	})
	return sn
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// client is a client of the sentinel itself.
func (sn *sentinel) client() *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: sn.addr, DialTimeout: time.Second})
}

// url is the Sentinel URL of database db, as an operator sets VALKEY_URL.
func (sn *sentinel) url(db int) string {
	return fmt.Sprintf("redis://%s/%d?master_name=%s", sn.addr, db, sentinelMaster)
}

// kill ends the server with SIGKILL (no shutdown, nothing flushed) and waits
// for it.
func (s *redisServer) kill() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd, s.exited = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Kill(); err != nil {
		return err
	}
	<-exited
	return nil
}

// Item: Valkey failover. A primary, one replica and a sentinel, all of the
// scenario's own; two workers and the CLI reach them only through the
// Sentinel URL. While the workers drain 36 short jobs the primary is killed
// (SIGKILL) and the sentinel promotes the replica. Every job still ends in
// one terminal state with one record per attempt, none ran twice (one
// job_started and one container per attempt), the CLI reads the new primary,
// and once the new primary serves, no worker logs queue_fetch_failed again:
// its blocking connection follows the promotion.
func TestFleetValkeyFailover(t *testing.T) {
	t.Parallel()
	requireFleet(t)
	dir := t.TempDir()
	primary, err := startRedis(filepath.Join(dir, "primary"), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.stop() })
	replica, err := startRedis(filepath.Join(dir, "replica"), true, "--replicaof", "127.0.0.1", strconv.Itoa(primary.port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.stop() })
	sn := startSentinel(t, dir, primary)
	waitReplicaKnown(t, sn, replica)

	s := newScenarioAt(t, "failover", sn.url, func(db int) *redis.Client {
		c, err := valkey.NewClient(sn.url(db), valkey.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
	ws := []*worker{s.worker("v1", nil), s.worker("v2", nil)}
	for _, w := range ws {
		w.start().waitEvent("worker_started", 60*time.Second, nil)
	}
	s.waitLive(ws...)
	if rep := s.status(); rep.Queues < 1+len(ws) || rep.Fleet != "" {
		t.Fatalf("status through the sentinel before the failover: %+v, want the shared queue and %d host queues", rep, len(ws))
	}

	router := enqueue.NewRouter(s.producer(), enqueue.RouterConfig{})
	var ids []string
	for i := range 36 {
		id := s.jobID("fo", i)
		s.enqueueForge(router, id, forgeJob("acme/failover", "", "JOB_SLEEP=1s\nJOB_PRINT_EXIT_LINE=1"))
		ids = append(ids, id)
	}
	// The kill comes while containers run: their jobs end, and are
	// reported, across the failover.
	running := 0
	s.eventually(120*time.Second, func(context.Context) error {
		running = runningContainers(s)
		if n := recordedCount(s, ids); n < 8 || running < 2 {
			return fmt.Errorf("%d of %d jobs recorded and %d containers running, waiting for 8 and 2", n, len(ids), running)
		}
		return nil
	})
	if err := primary.kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	promoted := waitPromoted(t, sn, replica)
	t.Logf("primary killed with %d containers running; the replica served as primary %s later", running, promoted.Sub(killed).Round(100*time.Millisecond))

	s.settle(4 * time.Minute)
	rep := s.status()
	if done := rep.Completed + rep.Failed + rep.Refused + rep.Cancelled; done != int64(len(ids)) || rep.Waiting+rep.Active != 0 {
		t.Fatalf("status through the sentinel after the failover: %+v, want all %d jobs finished", rep, len(ids))
	}
	// Long enough for a stale blocking connection to surface (it did about
	// 19 s after an outage, once every slot had been busy).
	time.Sleep(25 * time.Second)
	late := fetchFailuresAfter(t, s, promoted.Add(3*time.Second))
	for _, w := range ws {
		if w.last().exited() {
			t.Fatalf("%s died in the failover: %v\n%s", w.name, w.last().err, w.last().tail(40))
		}
	}
	twice := 0
	for _, id := range ids {
		if c := containerStarts(s, id); c > len(s.attempts(id)) {
			twice++
			t.Errorf("job %s: %d containers for %d recorded attempts\n%s", id, c, len(s.attempts(id)), s.trail(id))
		}
	}
	if late != 0 {
		t.Errorf("%d queue_fetch_failed lines after the new primary served", late)
	}
	s.report("valkey-failover", s.figuresOf(ids), fmt.Sprintf("primary SIGKILLed with %d containers running, replica promoted in %s; "+
		"%d jobs run twice; queue_fetch_failed %d in all, %d after promotion; %d reports retried",
		running, promoted.Sub(killed).Round(100*time.Millisecond), twice, count(s.procs(), "queue_fetch_failed", ""), late,
		count(s.procs(), "job_report_delivered", "")))
	for _, w := range ws {
		w.last().stop(40 * time.Second)
	}
}

// recordedCount is how many of ids have a record.
func recordedCount(s *scenario, ids []string) int {
	n := 0
	for _, id := range ids {
		if len(s.records(id)) > 0 {
			n++
		}
	}
	return n
}

// runningContainers is how many job containers the scenario's processes
// started and have not seen exit.
func runningContainers(s *scenario) int {
	n := 0
	for _, p := range s.procs() {
		n += len(p.find("job_container_started", nil)) - len(p.find("job_container_exited", nil))
	}
	return n
}

// containerStarts counts the containers started for job id across the
// scenario's processes.
func containerStarts(s *scenario, id string) int {
	n := 0
	for _, p := range s.procs() {
		n += len(p.find("job_container_started", containerOf(id)))
	}
	return n
}

// fetchFailuresAfter counts the queue_fetch_failed lines logged after at.
func fetchFailuresAfter(t *testing.T, s *scenario, at time.Time) int {
	t.Helper()
	n := 0
	for _, p := range s.procs() {
		for _, e := range p.find("queue_fetch_failed", nil) {
			when, err := time.Parse(time.RFC3339Nano, e.str("time"))
			if err != nil {
				t.Fatalf("queue_fetch_failed without a time: %v", e)
			}
			if when.After(at) {
				t.Logf("%s at %s: %s", p, when.Format(time.RFC3339Nano), e.str("err"))
				n++
			}
		}
	}
	return n
}

// waitReplicaKnown waits until the replica is in sync with the primary and
// the sentinel lists it, so that it can promote it.
func waitReplicaKnown(t *testing.T, sn *sentinel, replica *redisServer) {
	t.Helper()
	sc, rc := sn.client(), replica.client(0)
	defer sc.Close()
	defer rc.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		info, ierr := rc.Info(ctx, "replication").Result()
		reps, serr := sc.Replicas(ctx, sentinelMaster).Result()
		cancel()
		synced := ierr == nil && strings.Contains(info, "master_link_status:up")
		listed := false
		for _, r := range reps {
			listed = listed || (r["port"] == strconv.Itoa(replica.port) && !strings.Contains(r["flags"], "down"))
		}
		if synced && listed && serr == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica on port %d not ready (synced %v, listed %v, %v, %v)", replica.port, synced, listed, ierr, serr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitPromoted waits until the sentinel names the replica as the primary
// and the replica accepts writes, and returns when it did.
func waitPromoted(t *testing.T, sn *sentinel, replica *redisServer) time.Time {
	t.Helper()
	sc, rc := sn.client(), replica.client(0)
	defer sc.Close()
	defer rc.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		addr, err := sc.GetMasterAddrByName(ctx, sentinelMaster).Result()
		role := ""
		if err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(replica.port) {
			info, _ := rc.Info(ctx, "replication").Result()
			if strings.Contains(info, "role:master") {
				role = "master"
			}
		}
		cancel()
		if role == "master" {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sentinel did not promote the replica within 60 s (master %v, %v)", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
