package fleetstate

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
)

type pullRequestStore interface {
	Record(ctx context.Context, url string, o jobs.PullRequestOutcome) error
	Outcomes(ctx context.Context, urls []string) (map[string]jobs.PullRequestOutcome, error)
}

var (
	_ pullRequestStore = (*PullRequests)(nil)
	_ pullRequestStore = (*MemoryPullRequests)(nil)
)

// TestConformancePullRequests runs one behaviour against the in-memory store
// and the Valkey one, signed and not, so a consumer's tests on the fake hold
// for the real store.
func TestConformancePullRequests(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T) pullRequestStore{
		"memory": func(*testing.T) pullRequestStore { return NewMemoryPullRequests() },
		"valkey": func(t *testing.T) pullRequestStore { return NewPullRequests(livetest.Valkey(t).Client) },
		"valkey-signed": func(t *testing.T) pullRequestStore {
			return NewPullRequestsWith(livetest.Valkey(t).Client, PullRequestsConfig{Key: testFleetKey(t)})
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testPullRequestStore(t, open(t))
		})
	}
}

func testFleetKey(t *testing.T) fleet.Key {
	t.Helper()
	k, err := fleet.NewKey([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func testPullRequestStore(t *testing.T, s pullRequestStore) {
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	merged := "https://github.com/acme/widgets/pull/1"
	closed := "https://github.com/acme/widgets/pull/2"
	worked := "https://github.com/acme/widgets/pull/3"
	must := func(url string, o jobs.PullRequestOutcome) {
		t.Helper()
		if err := s.Record(ctx, url, o); err != nil {
			t.Fatalf("record %s: %v", url, err)
		}
	}
	// Merged arrives before a push seen earlier: merged stays, the push counts.
	must(merged, jobs.PullRequestOutcome{State: jobs.PullRequestMerged, UpdatedAt: t0.Add(time.Hour)})
	must(merged, jobs.PullRequestOutcome{State: jobs.PullRequestOpen, HumanCommits: 1, UpdatedAt: t0})
	// Closed, then a later reopen, then a later close.
	must(closed, jobs.PullRequestOutcome{State: jobs.PullRequestClosed, UpdatedAt: t0})
	must(closed, jobs.PullRequestOutcome{State: jobs.PullRequestOpen, UpdatedAt: t0.Add(time.Minute)})
	must(closed, jobs.PullRequestOutcome{State: jobs.PullRequestClosed, UpdatedAt: t0.Add(2 * time.Minute)})
	// Two pushes by a person, recorded concurrently: both count.
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Record(ctx, worked, jobs.PullRequestOutcome{State: jobs.PullRequestOpen, HumanCommits: 1, UpdatedAt: t0.Add(time.Duration(i) * time.Second)})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	got, err := s.Outcomes(ctx, []string{merged, closed, worked, "https://github.com/acme/widgets/pull/404", merged})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]jobs.PullRequestOutcome{
		merged: {State: jobs.PullRequestMerged, HumanCommits: 1, UpdatedAt: t0.Add(time.Hour)},
		closed: {State: jobs.PullRequestClosed, UpdatedAt: t0.Add(2 * time.Minute)},
		worked: {State: jobs.PullRequestOpen, HumanCommits: 2, UpdatedAt: t0.Add(time.Second)},
	}
	if len(got) != len(want) {
		t.Fatalf("outcomes: got %d %v, want %v (an unknown URL is absent)", len(got), got, want)
	}
	for u, w := range want {
		g, ok := got[u]
		if !ok || g.State != w.State || g.HumanCommits != w.HumanCommits || !g.UpdatedAt.Equal(w.UpdatedAt) {
			t.Errorf("%s: got %+v, want %+v", u, g, w)
		}
	}

	for _, bad := range []string{"", "ftp://x/pull/1", "https://x/pull/1 2", "https://x/" + strings.Repeat("a", MaxPullRequestURL)} {
		if err := s.Record(ctx, bad, want[merged]); !errors.Is(err, ErrPullRequestURL) {
			t.Errorf("record %.40q: %v, want ErrPullRequestURL", bad, err)
		}
	}
	if err := s.Record(ctx, merged, jobs.PullRequestOutcome{State: "won", UpdatedAt: t0}); err == nil {
		t.Error("an outcome that does not validate was recorded")
	}
}

// TestPullRequestsForgedValueDropped writes as a Valkey writer without the
// fleet key would: a value that does not validate, one copied from another
// pull request, and (on a signed store) an unsigned "merged". Each is
// dropped on read, never joined to a record.
func TestPullRequestsForgedValueDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := livetest.Valkey(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	forge := func(url string, v any, sig string) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		fields := []any{pullOutcomeField, string(b)}
		if sig != "" {
			fields = append(fields, pullSigField, sig)
		}
		if err := db.Client.HSet(ctx, PullRequestOutcomeKey(url), fields...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	bad := "https://github.com/acme/widgets/pull/1"
	moved := "https://github.com/acme/widgets/pull/2"
	forge(bad, map[string]any{"url": bad, "state": "merged", "humanCommits": -5, "updatedAt": now}, "")
	forge(moved, map[string]any{"url": "https://github.com/acme/other/pull/9", "state": "merged", "updatedAt": now}, "")

	plain := NewPullRequests(db.Client)
	got, err := plain.Outcomes(ctx, []string{bad, moved})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 || plain.Dropped() != 2 {
		t.Fatalf("forged values read as %v (dropped %d), want none read and 2 dropped", got, plain.Dropped())
	}

	key := testFleetKey(t)
	signed := NewPullRequestsWith(db.Client, PullRequestsConfig{Key: key})
	unsigned := "https://github.com/acme/widgets/pull/3"
	forge(unsigned, map[string]any{"url": unsigned, "state": "merged", "updatedAt": now}, "")
	otherKey, err := fleet.NewKey([]byte(strings.Repeat("o", 32)))
	if err != nil {
		t.Fatal(err)
	}
	wrong := "https://github.com/acme/widgets/pull/4"
	body, _ := json.Marshal(map[string]any{"url": wrong, "state": "merged", "updatedAt": now})
	sig, err := otherKey.SignEntry(PullRequestOutcomeKey(wrong), map[string]string{pullOutcomeField: string(body)})
	if err != nil {
		t.Fatal(err)
	}
	forge(wrong, map[string]any{"url": wrong, "state": "merged", "updatedAt": now}, sig)
	got, err = signed.Outcomes(ctx, []string{unsigned, wrong})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 || signed.Dropped() != 2 {
		t.Fatalf("unsigned or wrongly signed values read as %v (dropped %d), want none", got, signed.Dropped())
	}

	// The receiver's own write over a forged value replaces it, signed.
	if err := signed.Record(ctx, unsigned, jobs.PullRequestOutcome{State: jobs.PullRequestClosed, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	got, err = signed.Outcomes(ctx, []string{unsigned})
	if err != nil {
		t.Fatal(err)
	}
	if got[unsigned].State != jobs.PullRequestClosed {
		t.Fatalf("after the receiver's write: %+v, want closed (the forged merged replaced)", got[unsigned])
	}
	ttl, err := db.Client.TTL(ctx, PullRequestOutcomeKey(unsigned)).Result()
	if err != nil || ttl <= 0 || ttl > PullRequestOutcomeTTL {
		t.Fatalf("ttl %v %v, want within %v", ttl, err, PullRequestOutcomeTTL)
	}
}
