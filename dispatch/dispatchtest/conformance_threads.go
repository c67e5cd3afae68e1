package dispatchtest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
)

// ThreadsHarness is one fleet's Threads under test: the store as each host
// opens it (every host's sharing one state, as hosts on one Valkey do), its
// stale window, and a way to let time pass on its clock.
type ThreadsHarness struct {
	// Host returns the Threads host name opened, all with the stale window
	// StaleAfter.
	Host func(name string) dispatch.Threads
	// StaleAfter is the stores' stale window. The timed cases wait
	// fractions and multiples of it: on a live store, about a second or
	// two keeps them quick and clear of scheduling noise.
	StaleAfter time.Duration
	// Wait lets d pass on the stores' clock: a fake's clock moves, a live
	// test sleeps.
	Wait func(d time.Duration)
}

// TestThreads runs the Threads contract (dispatch/deps.go; the turn script
// of fleetstate/scripts.go) against the fleets newThreads makes, a fresh one
// per case. The cases that wait run in parallel.
func TestThreads(t *testing.T, newThreads func(t *testing.T) ThreadsHarness) {
	cases := []struct {
		name  string
		timed bool
		run   func(t *testing.T, h ThreadsHarness)
	}{
		{"OlderJobGoesFirst", false, threadOrder},
		{"OneHolderAtATime", false, threadOneHolder},
		{"HolderKeepsItsTurn", false, threadHolderAgain},
		{"DoneLetsTheNextGo", false, threadDone},
		{"DoneOfAJobNotInTheLineIsHarmless", false, threadDoneStranger},
		{"ThreadsDoNotBlockEachOther", false, threadIndependent},
		{"ConcurrentTurnsGrantOne", false, threadConcurrent},
		{"BadArgumentsAreErrors", false, threadBadArgs},
		{"StaleJobIsDropped", true, threadStale},
		{"AskingAgainIsNotStale", true, threadAlive},
		{"HolderTTLFreesACrashedHolder", true, threadCrashed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.timed {
				t.Parallel()
			}
			c.run(t, newThreads(t))
		})
	}
}

// threadTTL is a holder's ttl long enough never to lapse within a case.
const threadTTL = time.Hour

// threadBase is an enqueue time the cases count from: a minute ago.
func threadBase() time.Time { return time.Now().Add(-time.Minute).Truncate(time.Millisecond) }

func turn(t *testing.T, th dispatch.Threads, thread, job string, at time.Time, ttl time.Duration) dispatch.ThreadTurn {
	t.Helper()
	r, err := th.Turn(qctx(t), thread, job, at, ttl)
	if err != nil {
		t.Fatalf("Turn(%s, %s): %v", thread, job, err)
	}
	return r
}

// mustRun asks for job's turn and fails unless it is granted.
func mustRun(t *testing.T, th dispatch.Threads, thread, job string, at time.Time, ttl time.Duration) {
	t.Helper()
	if r := turn(t, th, thread, job, at, ttl); !r.Granted || r.Behind != "" {
		t.Fatalf("Turn(%s) = %+v, want granted", job, r)
	}
}

// mustWait asks for job's turn and fails unless it waits behind behind.
func mustWait(t *testing.T, th dispatch.Threads, thread, job string, at time.Time, behind string) {
	t.Helper()
	if r := turn(t, th, thread, job, at, threadTTL); r.Granted || r.Behind != behind {
		t.Fatalf("Turn(%s) = %+v, want waiting behind %s", job, r, behind)
	}
}

func done(t *testing.T, th dispatch.Threads, thread, job string) {
	t.Helper()
	if err := th.Done(qctx(t), thread, job); err != nil {
		t.Fatalf("Done(%s, %s): %v", thread, job, err)
	}
}

const issue = "github:acme/widgets#7"

// threadOrder: the line is ordered by enqueue time, not by asking: an older
// job that asks later still goes before a newer one, and a tie is ordered
// by id.
func threadOrder(t *testing.T, h ThreadsHarness) {
	a, b := h.Host("host-a"), h.Host("host-b")
	base := threadBase()
	mustRun(t, a, issue, "gh-c", base, threadTTL)
	mustWait(t, b, issue, "gh-new", base.Add(2*time.Second), "gh-c")
	mustWait(t, a, issue, "gh-old", base.Add(time.Second), "gh-c")
	done(t, a, issue, "gh-c")
	mustWait(t, b, issue, "gh-new", base.Add(2*time.Second), "gh-old")
	mustRun(t, a, issue, "gh-old", base.Add(time.Second), threadTTL)
	mustWait(t, b, issue, "gh-new", base.Add(2*time.Second), "gh-old")
	done(t, a, issue, "gh-old")
	mustRun(t, b, issue, "gh-new", base.Add(2*time.Second), threadTTL)
	done(t, b, issue, "gh-new")

	// Same enqueue time: the smaller id first, whoever asks first.
	mustRun(t, a, issue, "gh-h", base, threadTTL)
	mustWait(t, a, issue, "gh-y", base.Add(time.Second), "gh-h")
	mustWait(t, b, issue, "gh-x", base.Add(time.Second), "gh-h")
	done(t, a, issue, "gh-h")
	mustWait(t, a, issue, "gh-y", base.Add(time.Second), "gh-x")
	mustRun(t, b, issue, "gh-x", base.Add(time.Second), threadTTL)

	// A job asking again keeps its place: another enqueue time given on a
	// later ask does not move it.
	mustWait(t, a, issue, "gh-z", base.Add(3*time.Second), "gh-x")
	done(t, b, issue, "gh-x")
	mustRun(t, b, issue, "gh-y", base.Add(time.Hour), threadTTL)
	mustWait(t, a, issue, "gh-z", base.Add(3*time.Second), "gh-y")
}

// threadOneHolder: while a job holds the thread, every other job waits
// behind it, an older one too.
func threadOneHolder(t *testing.T, h ThreadsHarness) {
	a, b := h.Host("host-a"), h.Host("host-b")
	base := threadBase()
	mustRun(t, a, issue, "gh-2", base.Add(time.Second), threadTTL)
	mustWait(t, b, issue, "gh-1", base, "gh-2")
	mustWait(t, b, issue, "gh-3", base.Add(2*time.Second), "gh-2")
	mustWait(t, a, issue, "gh-1", base, "gh-2")
}

// threadHolderAgain: the holder asking again (a retry, a deferral after the
// thread gate) keeps its turn, from any host.
func threadHolderAgain(t *testing.T, h ThreadsHarness) {
	a, b := h.Host("host-a"), h.Host("host-b")
	base := threadBase()
	mustRun(t, a, issue, "gh-1", base, threadTTL)
	mustRun(t, a, issue, "gh-1", base, threadTTL)
	mustWait(t, b, issue, "gh-2", base.Add(time.Second), "gh-1")
	mustRun(t, b, issue, "gh-1", base, threadTTL)
	mustWait(t, a, issue, "gh-2", base.Add(time.Second), "gh-1")
}

// threadDone: Done frees the thread and the next job in the line takes it;
// a second Done changes nothing, and does not free the next holder.
func threadDone(t *testing.T, h ThreadsHarness) {
	a, b := h.Host("host-a"), h.Host("host-b")
	base := threadBase()
	mustRun(t, a, issue, "gh-1", base, threadTTL)
	mustWait(t, b, issue, "gh-2", base.Add(time.Second), "gh-1")
	mustWait(t, b, issue, "gh-3", base.Add(2*time.Second), "gh-1")
	done(t, a, issue, "gh-1")
	mustWait(t, b, issue, "gh-3", base.Add(2*time.Second), "gh-2")
	mustRun(t, b, issue, "gh-2", base.Add(time.Second), threadTTL)
	done(t, a, issue, "gh-1")
	mustWait(t, a, issue, "gh-3", base.Add(2*time.Second), "gh-2")
	done(t, b, issue, "gh-2")
	done(t, b, issue, "gh-2")
	mustRun(t, a, issue, "gh-3", base.Add(2*time.Second), threadTTL)
	done(t, a, issue, "gh-3")
	// The line is empty: the next job takes the thread at once.
	mustRun(t, b, issue, "gh-4", base.Add(3*time.Second), threadTTL)
}

// threadDoneStranger: Done of a job that never asked, on an empty thread or
// while another holds it, is harmless.
func threadDoneStranger(t *testing.T, h ThreadsHarness) {
	a := h.Host("host-a")
	base := threadBase()
	done(t, a, issue, "gh-ghost")
	done(t, a, "github:acme/never#1", "gh-ghost")
	mustRun(t, a, issue, "gh-1", base, threadTTL)
	mustWait(t, a, issue, "gh-2", base.Add(time.Second), "gh-1")
	done(t, a, issue, "gh-ghost")
	mustWait(t, a, issue, "gh-2", base.Add(time.Second), "gh-1")
	mustRun(t, a, issue, "gh-1", base, threadTTL)
}

// threadIndependent: two threads (an issue and a pull request of one
// repository, and another repository's) have lines of their own.
func threadIndependent(t *testing.T, h ThreadsHarness) {
	a, b := h.Host("host-a"), h.Host("host-b")
	base := threadBase()
	pull := "github:acme/widgets#8"
	other := "gitlab:acme/gadgets#7"
	mustRun(t, a, issue, "gh-1", base.Add(time.Second), threadTTL)
	mustRun(t, b, pull, "gh-2", base.Add(2*time.Second), threadTTL)
	mustRun(t, b, other, "gl-1", base, threadTTL)
	mustWait(t, a, pull, "gh-3", base, "gh-2")
	done(t, a, issue, "gh-1")
	mustWait(t, a, pull, "gh-3", base, "gh-2")
	mustWait(t, b, other, "gl-2", base.Add(time.Second), "gl-1")
	// One job id in two threads is two places.
	mustRun(t, a, issue, "gh-3", base, threadTTL)
}

// threadConcurrent: many jobs of one thread asking at once, from two hosts,
// make exactly one holder, and every other job waits behind it.
func threadConcurrent(t *testing.T, h ThreadsHarness) {
	hosts := []dispatch.Threads{h.Host("host-a"), h.Host("host-b")}
	base := threadBase()
	const n = 24
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		granted []string
		behind  = map[string]int{}
	)
	start := make(chan struct{})
	ats := make([]time.Time, n)
	for i := range n {
		job := fmt.Sprintf("gh-%02d", i)
		at := base.Add(time.Duration(rand.IntN(1000)) * time.Millisecond)
		ats[i] = at
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := hosts[i%2].Turn(qctx(t), issue, job, at, threadTTL)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("Turn(%s): %v", job, err)
			case r.Granted:
				granted = append(granted, job)
			default:
				behind[r.Behind]++
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(granted) != 1 {
		t.Fatalf("%d jobs granted (%v), want exactly one", len(granted), granted)
	}
	if behind[granted[0]] != n-1 || len(behind) != 1 {
		t.Fatalf("the others wait behind %v, want all %d behind the holder %s", behind, n-1, granted[0])
	}
	// The holder's Done lets exactly one more go: the oldest of the rest
	// (the smaller id of a tie), whatever order they ask again in.
	done(t, hosts[0], issue, granted[0])
	oldest := -1
	for i := range n {
		if fmt.Sprintf("gh-%02d", i) != granted[0] && (oldest < 0 || ats[i].UnixMilli() < ats[oldest].UnixMilli()) {
			oldest = i
		}
	}
	var next []string
	for _, i := range rand.Perm(n) {
		job := fmt.Sprintf("gh-%02d", i)
		if job == granted[0] {
			continue
		}
		if turn(t, hosts[i%2], issue, job, ats[i], threadTTL).Granted {
			next = append(next, job)
		}
	}
	if want := fmt.Sprintf("gh-%02d", oldest); len(next) != 1 || next[0] != want {
		t.Fatalf("after Done, %v granted, want exactly the oldest, %s", next, want)
	}
}

// threadBadArgs: an empty thread, a job id the fleet refuses and a ttl under
// a millisecond are errors, and line nobody up.
func threadBadArgs(t *testing.T, h ThreadsHarness) {
	a := h.Host("host-a")
	base := threadBase()
	for _, c := range []struct {
		thread, job string
		ttl         time.Duration
	}{
		{"", "gh-1", threadTTL},
		{issue, "", threadTTL},
		{issue, "gh\n1", threadTTL},
		{issue, "gh-\u202e1", threadTTL},
		{issue, "gh-1", 0},
		{issue, "gh-1", -time.Second},
	} {
		if _, err := a.Turn(qctx(t), c.thread, c.job, base, c.ttl); err == nil {
			t.Errorf("Turn(%q, %q, ttl %s) = nil error, want an error", c.thread, c.job, c.ttl)
		}
		if c.ttl > 0 {
			if err := a.Done(qctx(t), c.thread, c.job); err == nil {
				t.Errorf("Done(%q, %q) = nil error, want an error", c.thread, c.job)
			}
		}
	}
	mustRun(t, a, issue, "gh-2", base.Add(time.Second), threadTTL)
}

// threadStale: a job that stopped asking (its queue lost it) is dropped
// from the line after StaleAfter and no longer blocks the jobs behind it;
// asking again, it joins the line again at its place.
func threadStale(t *testing.T, h ThreadsHarness) {
	a, b := h.Host("host-a"), h.Host("host-b")
	base := threadBase()
	s := h.StaleAfter
	mustRun(t, a, issue, "gh-h", base, threadTTL)
	mustWait(t, a, issue, "gh-lost", base.Add(time.Second), "gh-h")
	h.Wait(s * 6 / 10)
	mustWait(t, b, issue, "gh-next", base.Add(2*time.Second), "gh-h")
	done(t, a, issue, "gh-h")
	mustWait(t, b, issue, "gh-next", base.Add(2*time.Second), "gh-lost")
	h.Wait(s * 6 / 10) // gh-lost last asked 1.2 windows ago, gh-next 0.6
	mustRun(t, b, issue, "gh-next", base.Add(2*time.Second), threadTTL)
	mustWait(t, a, issue, "gh-lost", base.Add(time.Second), "gh-next")
}

// threadAlive: a job that keeps asking stays in the line however long it
// waits; only silence makes a job stale. Its asks keep it, not its joining
// again: right after an ask more than StaleAfter after it joined, it is
// still there for the next job to wait behind.
func threadAlive(t *testing.T, h ThreadsHarness) {
	a, b := h.Host("host-a"), h.Host("host-b")
	base := threadBase()
	s := h.StaleAfter
	mustRun(t, a, issue, "gh-h", base, threadTTL)
	mustWait(t, a, issue, "gh-1", base.Add(time.Second), "gh-h")
	mustWait(t, b, issue, "gh-2", base.Add(2*time.Second), "gh-h")
	for range 2 { // 1.2 windows in all
		h.Wait(s * 6 / 10)
		mustWait(t, a, issue, "gh-1", base.Add(time.Second), "gh-h")
		mustWait(t, b, issue, "gh-2", base.Add(2*time.Second), "gh-h")
	}
	done(t, a, issue, "gh-h")
	mustWait(t, b, issue, "gh-2", base.Add(2*time.Second), "gh-1")
	mustRun(t, a, issue, "gh-1", base.Add(time.Second), threadTTL)
}

// threadCrashed: the holder asking again holds the thread for its new ttl,
// and is never stale while its ttl runs (it runs, it does not ask); a
// crashed holder's thread is free once that ttl lapsed: its line entry,
// silent for longer than StaleAfter, is dropped then. The same job asking
// again (its retry) lines up behind the new holder.
func threadCrashed(t *testing.T, h ThreadsHarness) {
	a, b := h.Host("host-a"), h.Host("host-b")
	base := threadBase()
	s := h.StaleAfter
	mustRun(t, a, issue, "gh-crashed", base, s)
	mustWait(t, b, issue, "gh-2", base.Add(time.Second), "gh-crashed")
	h.Wait(s * 6 / 10)
	mustRun(t, a, issue, "gh-crashed", base, s*16/10) // held until 2.2 windows
	mustWait(t, b, issue, "gh-2", base.Add(time.Second), "gh-crashed")
	h.Wait(s * 12 / 10) // 1.8: past the first ttl, silent for more than StaleAfter
	mustWait(t, b, issue, "gh-2", base.Add(time.Second), "gh-crashed")
	h.Wait(s * 6 / 10) // 2.4: past the second ttl
	mustRun(t, b, issue, "gh-2", base.Add(time.Second), threadTTL)
	mustWait(t, a, issue, "gh-crashed", base, "gh-2")
}
