package dispatchtest

import (
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
)

// TestHoldStore runs the HoldStore contract (the hold scripts of
// fleetstate/waitstate.go) against the stores newStore makes, a fresh one
// per case.
func TestHoldStore(t *testing.T, newStore func(t *testing.T) dispatch.HoldStore) {
	cases := []struct {
		name string
		run  func(t *testing.T, s dispatch.HoldStore)
	}{
		{"BeginStartsThenReads", holdBegin},
		{"AfterBoundsGiveAfterAt", holdAfterAt},
		{"CheckedCountsRoundsAndFaults", holdChecked},
		{"ThrottledCountsUntilAChecked", holdThrottled},
		{"ReleaseReleases", holdRelease},
		{"NewerDeliveryTakesTheDedupIDOver", holdTakeover},
		{"SupersededRecordsNothing", holdSuperseded},
		{"GoneHoldIsLost", holdLost},
		{"EndFreesTheDedupID", holdEnd},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore(t)) })
	}
}

var holdBounds = dispatch.HoldBounds{AfterMax: 24 * time.Hour, WaitMax: 24 * time.Hour}

func begin(t *testing.T, s dispatch.HoldStore, job, dedup string, b dispatch.HoldBounds) dispatch.HoldState {
	t.Helper()
	st, err := s.Begin(qctx(t), job, dedup, b)
	if err != nil {
		t.Fatalf("Begin(%s): %v", job, err)
	}
	return st
}

func holdCall(t *testing.T, what string, st dispatch.HoldState, err error) dispatch.HoldState {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return st
}

func holdBegin(t *testing.T, s dispatch.HoldStore) {
	st := begin(t, s, "j1", "", holdBounds)
	if !st.Fresh || st.Since.IsZero() || st.Now.Before(st.Since) || st.Checks != 0 || st.Released || st.Superseded || st.Lost {
		t.Fatalf("fresh Begin = %+v", st)
	}
	again := begin(t, s, "j1", "", holdBounds)
	if again.Fresh || !again.Since.Equal(st.Since) {
		t.Fatalf("second Begin = %+v, want the hold in progress since %s", again, st.Since)
	}
}

func holdAfterAt(t *testing.T, s dispatch.HoldStore) {
	b := holdBounds
	b.AfterDelay = time.Hour
	st := begin(t, s, "j1", "", b)
	if !st.AfterAt.Equal(st.Since.Add(time.Hour)) {
		t.Fatalf("AfterAt %s, want since+1h (%s)", st.AfterAt, st.Since.Add(time.Hour))
	}
	at := time.Now().Add(3 * time.Hour).Truncate(time.Millisecond)
	b.AfterAt = at
	st = begin(t, s, "j2", "", b)
	if !st.AfterAt.Equal(at) {
		t.Fatalf("AfterAt %s, want the later instant %s", st.AfterAt, at)
	}
}

func holdChecked(t *testing.T, s dispatch.HoldStore) {
	begin(t, s, "j1", "", holdBounds)
	st, err := s.Checked(qctx(t), "j1", "", dispatch.CheckOutcome{Met: 1, Fault: true})
	st = holdCall(t, "Checked", st, err)
	if st.Checks != 1 || st.Faults != 1 || st.Met != 1 || st.Released {
		t.Fatalf("after a faulted round: %+v", st)
	}
	st, err = s.Checked(qctx(t), "j1", "", dispatch.CheckOutcome{Met: 3})
	st = holdCall(t, "Checked", st, err)
	if st.Checks != 2 || st.Faults != 0 || st.Met != 3 || st.Released {
		t.Fatalf("after a clean round: %+v (faults count in a row)", st)
	}
	st, err = s.Checked(qctx(t), "j1", "", dispatch.CheckOutcome{Met: 3, AllMet: true})
	st = holdCall(t, "Checked", st, err)
	if st.Checks != 3 || !st.Released {
		t.Fatalf("after every condition met: %+v, want released", st)
	}
}

func holdThrottled(t *testing.T, s dispatch.HoldStore) {
	begin(t, s, "j1", "", holdBounds)
	for i := 1; i <= 2; i++ {
		st, err := s.Throttled(qctx(t), "j1", "")
		if st = holdCall(t, "Throttled", st, err); st.Throttles != i {
			t.Fatalf("throttles %d, want %d", st.Throttles, i)
		}
	}
	st, err := s.Checked(qctx(t), "j1", "", dispatch.CheckOutcome{})
	if st = holdCall(t, "Checked", st, err); st.Throttles != 0 {
		t.Fatalf("throttles %d after a round, want 0", st.Throttles)
	}
}

func holdRelease(t *testing.T, s dispatch.HoldStore) {
	begin(t, s, "j1", "d1", holdBounds)
	st, err := s.Release(qctx(t), "j1", "d1")
	if st = holdCall(t, "Release", st, err); !st.Released || st.Lost {
		t.Fatalf("Release = %+v", st)
	}
}

func holdTakeover(t *testing.T, s dispatch.HoldStore) {
	begin(t, s, "old", "d1", holdBounds)
	st := begin(t, s, "new", "d1", holdBounds)
	if !st.Fresh || st.Previous != "old" || st.Superseded {
		t.Fatalf("newer delivery's Begin = %+v, want fresh with previous old", st)
	}
	st, err := s.Throttled(qctx(t), "old", "d1")
	if st = holdCall(t, "Throttled", st, err); !st.Superseded || st.Throttles != 0 {
		t.Fatalf("the older hold = %+v, want superseded, nothing counted", st)
	}
}

func holdSuperseded(t *testing.T, s dispatch.HoldStore) {
	begin(t, s, "j1", "", holdBounds)
	if err := s.Supersede(qctx(t), "j1"); err != nil {
		t.Fatal(err)
	}
	st, err := s.Checked(qctx(t), "j1", "", dispatch.CheckOutcome{Met: 1, AllMet: true})
	if st = holdCall(t, "Checked", st, err); !st.Superseded || st.Checks != 0 || st.Released {
		t.Fatalf("a superseded hold's round = %+v, want superseded and nothing recorded", st)
	}
	if err := s.Supersede(qctx(t), "never-held"); err != nil {
		t.Fatalf("Supersede of a hold that is gone: %v", err)
	}
}

func holdLost(t *testing.T, s dispatch.HoldStore) {
	for name, call := range map[string]func() (dispatch.HoldState, error){
		"Throttled": func() (dispatch.HoldState, error) { return s.Throttled(qctx(t), "gone", "") },
		"Checked":   func() (dispatch.HoldState, error) { return s.Checked(qctx(t), "gone", "", dispatch.CheckOutcome{}) },
		"Release":   func() (dispatch.HoldState, error) { return s.Release(qctx(t), "gone", "") },
	} {
		st, err := call()
		if st = holdCall(t, name, st, err); !st.Lost {
			t.Fatalf("%s of a hold that is gone = %+v, want Lost", name, st)
		}
	}
}

func holdEnd(t *testing.T, s dispatch.HoldStore) {
	begin(t, s, "j1", "d1", holdBounds)
	if err := s.End(qctx(t), "j1"); err != nil {
		t.Fatal(err)
	}
	st, err := s.Throttled(qctx(t), "j1", "d1")
	if st = holdCall(t, "Throttled", st, err); !st.Lost {
		t.Fatalf("after End = %+v, want Lost", st)
	}
	if st := begin(t, s, "j2", "d1", holdBounds); st.Previous != "" {
		t.Fatalf("Begin after End = %+v, want no previous holder", st)
	}
	if err := s.End(qctx(t), "never-held"); err != nil {
		t.Fatalf("End of nothing: %v", err)
	}
}
