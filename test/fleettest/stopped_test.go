package fleettest

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/registry"
)

// A host frozen with SIGSTOP for longer than the route-fresh window and the
// registry TTL: routed work stops reaching it once its last beat is older
// than the window (jobs the router would have given it go to the other
// capable host), and the profile-only jobs stranded on its queue are
// re-homed by another worker once its row has expired, and run there. Thawed
// with SIGCONT, it rejoins the registry and still exits cleanly on SIGTERM.
//
// The router here uses the default window, capabilities.RouteFresh (45 s).
// A shorter one would do as long as it stays well above the 15 s beat (a
// live host's age reaches 15 s between beats, more on a loaded machine; a
// window at or below that would drop live hosts from routing between beats),
// but it would save nothing: the scenario waits for the 90 s row expiry
// anyway. This is the suite's long scenario (about two and a half minutes).
func TestFleetStoppedHostRehomed(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "stop")
	resolver := s.script("resolve-prod", "echo TOKEN=fleet-stop-secret\n")
	s1 := s.worker("s1", map[string]string{"PI_SECRET_PROFILES": "prod:" + resolver})
	s2 := s.worker("s2", map[string]string{"PI_SECRET_PROFILES": "prod:" + resolver})
	s3 := s.worker("s3", nil)
	for _, w := range []*worker{s1, s2, s3} {
		w.start().waitEvent("worker_started", 60*time.Second, nil)
	}
	s.waitLive(s1, s2, s3)

	// Job ids the route gives to s1 while both prod hosts are fresh.
	both := []capabilities.Host{
		{Name: s1.name, Caps: "s:prod", Routes: true, AgeKnown: true},
		{Name: s2.name, Caps: "s:prod", Routes: true, AgeKnown: true},
		{Name: s3.name, Caps: "", Routes: true, AgeKnown: true},
	}
	needs := capabilities.Needs("prod", nil)
	var toS1 []string
	for i := 0; len(toS1) < 4; i++ {
		if id := s.jobID("routed", i); capabilities.Route(both, needs, id, capabilities.RouteFresh) == s1.name {
			toS1 = append(toS1, id)
		}
	}
	job := forgeJob("acme/stop", "prod", "JOB_SLEEP=300ms")

	// Before the stop the router agrees: the first of them lands on s1.
	router := enqueue.NewRouter(s.producer(), enqueue.RouterConfig{})
	if e := s.enqueueForge(router, toS1[0], job); e.Queue != s1.hostQueue() {
		t.Fatalf("before the stop %s went to %s, want %s", toS1[0], e.Queue, s1.hostQueue())
	}
	if rec := s.waitRecord(toS1[0], 60*time.Second); rec.Host != s1.name || rec.Outcome != jobs.OutcomeCompleted {
		t.Fatalf("before the stop: %+v", rec.Record)
	}

	frozen := s1.last()
	frozen.signal(syscall.SIGSTOP)
	stoppedAt := time.Now()
	// Stranded: profile-only jobs a front-end put on s1's queue (routed
	// there just before it froze).
	stranded := []string{s.jobID("stranded", 0), s.jobID("stranded", 1)}
	for _, id := range stranded {
		s.addTo(s1.hostQueue(), id, job)
	}

	// Past the window, new work goes to the fresh capable host.
	s.eventually(90*time.Second, func(ctx context.Context) error {
		age, ok, err := rowAge(ctx, s, s1.name)
		switch {
		case err != nil:
			return err
		case !ok:
			return fmt.Errorf("%s's row expired before its age passed the window", s1.name)
		case age <= capabilities.RouteFresh+time.Second:
			return fmt.Errorf("%s's last beat is %s old, not yet past %s", s1.name, age, capabilities.RouteFresh)
		}
		return nil
	})
	fresh := enqueue.NewRouter(s.producer(), enqueue.RouterConfig{}) // no cached read
	for _, id := range toS1[1:] {
		if e := s.enqueueForge(fresh, id, job); e.Queue != s2.hostQueue() {
			t.Fatalf("with %s stale, %s went to %s, want %s", s1.name, id, e.Queue, s2.hostQueue())
		}
	}
	for _, id := range toS1[1:] {
		if rec := s.waitRecord(id, 60*time.Second); rec.Host != s2.name || rec.Outcome != jobs.OutcomeCompleted {
			t.Fatalf("routed job %s: %+v, want completed on %s", id, rec.Record, s2.name)
		}
	}

	// The row expires 90 s after the last beat; the others re-home within
	// their next pass (every minute).
	s.eventually(110*time.Second-time.Since(stoppedAt), func(ctx context.Context) error {
		if _, ok, err := rowAge(ctx, s, s1.name); err != nil || ok {
			return fmt.Errorf("%s's row still present (%v)", s1.name, err)
		}
		return nil
	})
	t.Logf("%s's row expired %s after SIGSTOP", s1.name, time.Since(stoppedAt).Round(time.Second))
	for _, id := range stranded {
		s.eventually(90*time.Second, func(context.Context) error {
			var got []event
			for _, p := range append(s2.allProcs(), s3.allProcs()...) {
				got = append(got, p.find("job_rehomed", jobIs(id))...)
			}
			switch {
			case len(got) == 0:
				return fmt.Errorf("no job_rehomed for %s yet", id)
			case len(got) > 1:
				return fmt.Errorf("job %s re-homed %d times", id, len(got))
			case got[0].str("from") != s1.hostQueue() || got[0].str("to") != s2.hostQueue() || got[0].str("reason") != "host-row-expired":
				return errors.New("job_rehomed: " + fmt.Sprint(got[0]))
			}
			return nil
		})
		rec := s.waitRecord(id, 60*time.Second)
		if rec.Host != s2.name || rec.Outcome != jobs.OutcomeCompleted {
			t.Fatalf("re-homed job %s: %+v, want completed on %s", id, rec.Record, s2.name)
		}
	}
	t.Logf("stranded jobs re-homed and run %s after SIGSTOP", time.Since(stoppedAt).Round(time.Second))

	// Thawed, s1 beats again and leaves cleanly; it ran none of the jobs
	// that were moved away from it.
	frozen.signal(syscall.SIGCONT)
	s.waitLive(s1)
	for _, id := range append(stranded, toS1[1:]...) {
		if n := count([]*proc{frozen}, "job_started", id); n != 0 {
			t.Fatalf("the thawed %s started %s", s1.name, id)
		}
	}
	s.settle(60 * time.Second)
	frozen.stop(40 * time.Second)
}

// rowAge reads a host's registry row: its age by the server's clock, and
// whether it exists at all.
func rowAge(ctx context.Context, s *scenario, name string) (time.Duration, bool, error) {
	hosts, err := registry.ReadLive(ctx, s.client, 2*time.Second)
	if err != nil {
		return 0, false, err
	}
	for _, h := range hosts {
		if h.Name == name {
			if !h.AgeKnown {
				return 0, true, fmt.Errorf("%s's row cannot be dated", name)
			}
			return h.Age, true, nil
		}
	}
	return 0, false, nil
}
