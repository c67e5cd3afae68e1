package fleettest

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
)

// soakWindow is how long the random kills go on.
const soakWindow = 60 * time.Second

// A random-kill soak: three workers drain 72 short jobs (exit 0, 2 and 1,
// two attempts each with no backoff) while, for a minute, one of them at a
// time is killed with SIGKILL at a random moment (mid-job, idle, and one
// kill in four again within a second of the restart, mid-boot) and
// restarted at once. Once the kills stop and every job finished, each
// attempt has exactly one record, none is lost, no job started more often
// than its attempts, and no container is left. The figures are one of the suite's closing lines.
func TestFleetRandomKillSoak(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "soak")
	ws := []*worker{s.worker("x1", nil), s.worker("x2", nil), s.worker("x3", nil)}
	for _, w := range ws {
		w.start().waitEvent("worker_started", 60*time.Second, nil)
	}
	s.waitLive(ws...)

	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("soak seed %d", seed)
	var ids []string
	enqueue := func(n int) {
		for range n {
			i := len(ids)
			code := 0
			switch {
			case i%11 == 5:
				code = 1
			case i%7 == 3:
				code = 2
			}
			sleep := time.Duration(500+rng.IntN(3000)) * time.Millisecond
			task := fmt.Sprintf("JOB_SLEEP=%s\nJOB_EXIT_CODE=%d\nJOB_PRINT_EXIT_LINE=1", sleep, code)
			id := s.jobID("soak", i)
			s.addJob(fleet.SharedQueue, id, forgeJob("acme/soak", "", task), 2)
			ids = append(ids, id)
		}
	}

	kills, bootKills := 0, 0 // bootKills: killed before worker_started
	start := time.Now()
	for time.Since(start) < soakWindow {
		if len(ids) < 72 {
			enqueue(6)
		}
		time.Sleep(time.Duration(2000+rng.IntN(3000)) * time.Millisecond)
		w := ws[rng.IntN(len(ws))]
		p := w.last()
		if p.exited() {
			t.Fatalf("%s died on its own: %v\n%s", p, p.err, p.tail(40))
		}
		if len(p.find("worker_started", nil)) == 0 {
			bootKills++
		}
		p.signal(syscall.SIGKILL)
		p.crashed(10 * time.Second)
		kills++
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		restarted := w.start()
		if rng.IntN(4) == 0 {
			// Aimed at the boot: reap, sweep, orphans.
			time.Sleep(time.Duration(rng.IntN(250)) * time.Millisecond)
			if restarted.exited() {
				t.Fatalf("%s died on its own: %v\n%s", restarted, restarted.err, restarted.tail(40))
			}
			if len(restarted.find("worker_started", nil)) == 0 {
				bootKills++
			}
			restarted.signal(syscall.SIGKILL)
			restarted.crashed(10 * time.Second)
			kills++
			w.start()
		}
	}
	enqueue(72 - len(ids))
	for _, w := range ws {
		w.last().waitEvent("worker_started", 60*time.Second, nil)
	}
	t.Logf("soak: %d kills in %s (%d during a boot)", kills, time.Since(start).Round(time.Second), bootKills)
	s.settle(4 * time.Minute)

	for _, w := range ws {
		w.last().stop(40 * time.Second)
		if left, err := containersOf(w.name); err != nil || len(left) != 0 {
			t.Errorf("containers of %s left after the soak: %v (%v)", w.name, left, err)
		}
	}
	s.report("random-kill-soak", s.figuresOf(ids), fmt.Sprintf("3 workers, %d SIGKILLs over %s (%d during a boot)", kills, soakWindow, bootKills))
}
