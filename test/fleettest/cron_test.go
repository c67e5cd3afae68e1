package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/cronsync"
)

// Cron agreement between hosts: two workers whose triggers files define the
// same cron id differently. The first to boot installs its scheduler; the
// second refuses (cron_divergence_refused, with both sides' counts) and
// installs nothing. Once the files agree, the second reloads, installs, and
// both hosts hold the same scheduler; nobody refuses again. A third host
// without a triggers file abstains and blocks nobody.
func TestFleetCronDivergenceConverges(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "cron")
	folder := t.TempDir() // exists on this machine: both hosts serve the trigger
	// Patterns that do not fire while the test runs (1 January, 03:00 or
	// 04:00 UTC), so no cron job joins the ledger.
	triggers := func(pattern string) []byte {
		return fmt.Appendf(nil, `{"triggers":[{"on":{"type":"cron","id":"nightly","pattern":%q,"tz":"UTC"},`+
			`"run":{"kind":"local","folder":%q,"flow":"fix","task":"JOB_SLEEP=300ms"}}]}`, pattern, folder)
	}
	fileA, fileB := filepath.Join(s.dir, "triggers-a.json"), filepath.Join(s.dir, "triggers-b.json")
	contentA, contentB := triggers("0 3 1 1 *"), triggers("0 4 1 1 *")
	for path, data := range map[string][]byte{fileA: contentA, fileB: contentB} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c1 := s.worker("c1", map[string]string{"PI_TRIGGERS_FILE": fileA})
	c2 := s.worker("c2", map[string]string{"PI_TRIGGERS_FILE": fileB})
	c3 := s.worker("c3", nil)
	first := c1.start()
	c3.start().waitEvent("worker_started", 60*time.Second, nil)
	if e := first.waitEvent("schedules_installed", 60*time.Second, nil); e.str("installed") != "1" {
		t.Fatalf("%s schedules_installed: %v", c1.name, e)
	}
	s.waitLive(c1, c3)

	second := c2.start()
	refusal := second.waitEvent("cron_divergence_refused", 60*time.Second, nil)
	var peers []cronsync.PeerView
	if err := json.Unmarshal([]byte(refusal.str("peers")), &peers); err != nil || len(peers) != 1 {
		t.Fatalf("refusal peers %s (%v), want c1 alone (c3 abstains)", refusal.str("peers"), err)
	}
	if refusal.str("cronCount") != "1" || peers[0].Host != c1.name || peers[0].CronCount != 1 || peers[0].FPCron == refusal.str("mine") {
		t.Fatalf("cron_divergence_refused does not give both sides: %v", refusal)
	}
	second.waitEvent("schedules_install_refused", 30*time.Second, nil)
	second.waitEvent("worker_started", 60*time.Second, nil)
	s.wantSchedulers(c1.hostQueue(), "0 3 1 1 *")
	s.wantSchedulers(c2.hostQueue(), "")

	// The operator makes the files agree (both get the same content).
	agreedAt := time.Now()
	for _, path := range []string{fileA, fileB} {
		if err := os.WriteFile(path, contentA, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if e := second.waitEvent("schedules_reloaded", 30*time.Second, nil); e.str("installed") != "1" {
		t.Fatalf("%s schedules_reloaded: %v", c2.name, e)
	}
	t.Logf("%s converged %s after the files agreed", c2.name, time.Since(agreedAt).Round(100*time.Millisecond))
	s.wantSchedulers(c1.hostQueue(), "0 3 1 1 *")
	s.wantSchedulers(c2.hostQueue(), "0 3 1 1 *")

	// Both publish the same fingerprint now; the abstainer publishes none.
	s.eventually(20*time.Second, func(context.Context) error {
		h := s.hosts()
		a, b, c := h[c1.name], h[c2.name], h[c3.name]
		if a.FPCron == "" || a.FPCron != b.FPCron || a.CronCount != 1 || b.CronCount != 1 || c.FPCron != "" {
			return fmt.Errorf("fingerprints: %s %+v, %s %+v, %s %+v", c1.name, a, c2.name, b, c3.name, c)
		}
		return nil
	})
	// No further refusal, on either side: one in c2's boot, none in c1.
	time.Sleep(3 * time.Second)
	if n := count([]*proc{first}, "cron_divergence_refused", ""); n != 0 {
		t.Fatalf("%s refused %d times:\n%s", c1.name, n, first.tail(30))
	}
	if n := count([]*proc{second}, "cron_divergence_refused", ""); n != 1 {
		t.Fatalf("%s refused %d times, want once (at boot):\n%s", c2.name, n, second.tail(30))
	}
	if n := count([]*proc{second}, "schedules_reload_refused", ""); n != 0 {
		t.Fatalf("%s refused a reload:\n%s", c2.name, second.tail(30))
	}
	s.settle(10 * time.Second) // nothing was enqueued: the ledger is untouched
}

// wantSchedulers checks the schedulers of a queue: exactly "nightly" with
// pattern, or none when pattern is "".
func (s *scenario) wantSchedulers(queueName, pattern string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := s.queue(queueName).Schedulers(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	if pattern == "" {
		if len(got) != 0 {
			s.t.Fatalf("%s has schedulers %+v, want none", queueName, got)
		}
		return
	}
	if len(got) != 1 || got[0].ID != "nightly" || got[0].Pattern != pattern {
		s.t.Fatalf("%s schedulers %+v, want nightly with %q", queueName, got, pattern)
	}
}
