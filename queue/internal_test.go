package queue

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
)

func TestIsJSInteger_MatchesBullMQ(t *testing.T) {
	t.Parallel()
	// `${parseInt(id, 10)}` === id, evaluated in node for each value.
	tests := []struct {
		give string
		want bool
	}{
		{"0", true}, {"123", true}, {"-5", true}, {"9007199254740992", true},
		{"12345678901234567000", true}, {"100000000000000000000", true},
		{"-0", false}, {"007", false}, {"1e3", false}, {" 12", false}, {"12 ", false},
		{"+1", false}, {"1.0", false}, {"9007199254740993", false},
		{"12345678901234567890", false}, {"1000000000000000000000", false},
		{"", false}, {"-", false}, {"abc", false}, {"12a", false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, isJSInteger(tt.give), tt.give)
	}
}

func TestKeys_BullMQLayout(t *testing.T) {
	t.Parallel()
	k := newKeys("bull", "pi-jobs@w1")
	require.Equal(t, "bull:pi-jobs@w1:wait", k.wait())
	require.Equal(t, "bull:pi-jobs@w1:marker", k.marker())
	require.Equal(t, "bull:pi-jobs@w1:meta", k.meta())
	require.Equal(t, "bull:pi-jobs@w1:", k.jobPrefix())
	require.Equal(t, "bull:pi-jobs@w1:de:x#1", k.dedup("x#1"))
	require.Equal(t, "bull:pi-jobs@w1:repeat:s", k.scheduler("s"))
	require.Len(t, k.scriptKeys("extra"), kCount+1)
	require.Equal(t, `bull:pi-jobs@*:meta`, hostMetaPattern("bull"))
	require.Equal(t, `a\*b:pi-jobs@*:meta`, hostMetaPattern("a*b"))
	name, ok := queueFromMetaKey("bull", "bull:pi-jobs@w1:meta")
	require.True(t, ok)
	require.Equal(t, "pi-jobs@w1", name)
	_, ok = queueFromMetaKey("bull", "bull:meta")
	require.False(t, ok)
}

func TestKeep_WireAndBack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give Keep
		wire string
	}{
		{Keep{}, `null`},
		{Keep{None: true}, `true`},
		{Keep{Count: 5}, `{"count":5}`},
		{Keep{Age: 36 * time.Hour}, `{"age":129600}`},
		{Keep{Age: 1500 * time.Millisecond, Count: 2}, `{"age":1.5,"count":2}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.give.wire())
		require.NoError(t, err)
		require.JSONEq(t, tt.wire, string(b))
		require.Equal(t, tt.give, parseKeep(b), tt.wire)
	}
	// BullMQ's other spellings.
	require.Equal(t, Keep{None: true}, parseKeep([]byte(`0`)))
	require.Equal(t, Keep{Count: 3}, parseKeep([]byte(`3`)))
	require.Equal(t, Keep{}, parseKeep([]byte(`false`)))
	require.Equal(t, Keep{}, parseKeep([]byte(`"junk"`)))
}

func TestParseJob_JunkFieldsGiveDefinedResult(t *testing.T) {
	t.Parallel()
	j := parseJob("7", []any{
		"name", "x", "data", "{not json", "opts", "[1,2", "atm", "NaN", "timestamp", "-5",
		"processedOn", "1e400", "returnvalue", "\x00", "priority", "3", "odd",
	})
	require.Equal(t, "7", j.ID)
	require.Nil(t, j.Data)
	require.Zero(t, j.AttemptsMade)
	require.True(t, j.Timestamp.IsZero())
	require.True(t, j.ProcessedOn.IsZero())
	require.Equal(t, 3, j.Priority)
	require.Contains(t, j.Corrupt, "data")
	require.Contains(t, j.Corrupt, "opts")
	require.Contains(t, j.Corrupt, "returnvalue")

	ok := parseJob("8", []any{"name", "y", "data", `{"a":1}`, "opts",
		`{"attempts":2,"backoff":{"type":"exponential","delay":60000},"removeOnFail":{"age":604800},"de":{"id":"d"}}`,
		"atm", "1", "timestamp", "1700000000000"})
	require.Empty(t, ok.Corrupt)
	require.Equal(t, 2, ok.Attempts)
	require.Equal(t, Backoff{Type: BackoffExponential, Delay: time.Minute}, ok.Backoff)
	require.Equal(t, Keep{Age: 7 * 24 * time.Hour}, ok.RemoveOnFail)
	require.Equal(t, "d", ok.DedupID)
	require.Equal(t, int64(1700000000000), ok.Timestamp.UnixMilli())
}

func TestAddOptions_WireIsBullMQs(t *testing.T) {
	t.Parallel()
	b, err := AddOptions{
		JobID: "gh-1", Delay: 1500 * time.Millisecond, Attempts: 2,
		Backoff:          Backoff{Type: BackoffExponential, Delay: time.Minute},
		RemoveOnComplete: Keep{Age: 24 * time.Hour}, RemoveOnFail: Keep{None: true},
		Dedup: &Dedup{ID: "r#1", TTL: 10 * time.Minute},
	}.validate()
	require.NoError(t, err)
	require.JSONEq(t, `{"attempts":2,"delay":1500,"jobId":"gh-1",
		"backoff":{"type":"exponential","delay":60000},
		"removeOnComplete":{"age":86400},"removeOnFail":true,
		"de":{"id":"r#1","ttl":600000}}`, string(b))
}

func TestCompletionBatcher_QueuesWhileCallsRunAndHonoursCancel(t *testing.T) {
	t.Parallel()
	var b completionBatcher
	release := make(chan struct{})
	var mu sync.Mutex
	var calls [][]string
	run := func(_ context.Context, batch []*completion) func() {
		<-release
		mu.Lock()
		defer mu.Unlock()
		var ids []string
		for _, c := range batch {
			ids = append(ids, c.id)
		}
		calls = append(calls, ids)
		return func() {
			for _, c := range batch {
				c.err = errors.New("ran " + c.id)
			}
		}
	}
	ctx := context.Background()
	errs := make(chan error, 4)
	start := func(ctx context.Context, c *completion) {
		go func() {
			if err := b.do(ctx, c, run); err != nil {
				errs <- err
				return
			}
			errs <- c.err
		}()
	}
	pending := func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.pending)
	}
	// Two calls run at once; the next completions wait.
	start(ctx, &completion{id: "a"})
	start(ctx, &completion{id: "b"})
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.inflight == 2 }, time.Second, time.Millisecond)
	cctx, cancel := context.WithCancel(ctx)
	start(cctx, &completion{id: "cancelled"})
	require.Eventually(t, func() bool { return pending() == 1 }, time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-errs, context.Canceled, "a waiting completion withdraws when its ctx ends")
	require.Zero(t, pending())
	start(ctx, &completion{id: "c"})
	require.Eventually(t, func() bool { return pending() == 1 }, time.Second, time.Millisecond)
	start(ctx, &completion{id: "d"})
	require.Eventually(t, func() bool { return pending() == 2 }, time.Second, time.Millisecond)
	close(release)
	got := map[string]bool{}
	for range 4 {
		err := <-errs
		require.Error(t, err)
		got[err.Error()] = true
	}
	require.Equal(t, map[string]bool{"ran a": true, "ran b": true, "ran c": true, "ran d": true}, got)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, calls, 3)
	require.Contains(t, calls, []string{"c", "d"}, "the waiting completions go together in the next call")
	require.Zero(t, b.inflight)
}

func TestTakeFieldOrder_IsLibsJobFields(t *testing.T) {
	t.Parallel()
	lib, err := luaFiles.ReadFile("lua/lib.lua")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?s)\nlocal jobFieldIndex = \{(.*?)\}`).FindSubmatch(lib)
	require.NotNil(t, m, "lib.lua defines jobFieldIndex")
	lua := make([]string, len(takeFieldOrder))
	pairs := regexp.MustCompile(`(\w+) = (\d+)`).FindAllSubmatch(m[1], -1)
	require.Len(t, pairs, len(takeFieldOrder))
	for _, p := range pairs {
		n, err := strconv.Atoi(string(p[2]))
		require.NoError(t, err)
		require.True(t, n >= 1 && n <= len(lua), "number %d of %s", n, p[1])
		lua[n-1] = string(p[1])
	}
	require.Equal(t, takeFieldOrder[:], lua, "a take's fields are numbered the same on both sides")

	// Every field parseJob reads is in the order, and nothing else.
	for _, name := range takeFieldOrder {
		var f hashFields
		f.set(name, "1")
		require.NotEqual(t, hashFields{}, f, "parseJob reads %q", name)
	}
}

func TestRunCompletions_ErrorsStayWithTheirCompletion(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	q, err := New(db.Client, fleet.SharedQueue, Config{})
	require.NoError(t, err)
	ctx := context.Background()
	var ids []string
	for range 4 {
		id, _, err := q.Add(ctx, "run", nil, AddOptions{})
		require.NoError(t, err)
		ids = append(ids, id)
	}
	for i, tok := range []string{"ta", "tb", "tc"} {
		job, err := q.Fetch(ctx, tok)
		require.NoError(t, err)
		require.Equal(t, ids[i], job.ID)
	}
	// A peer overwrote c's hash with a string: commands on it fail.
	cKey := q.keys.jobPrefix() + ids[2]
	require.NoError(t, db.Client.Del(ctx, cKey).Err())
	require.NoError(t, db.Client.Set(ctx, cKey, "junk", 0).Err())

	null := []byte("null")
	batch := []*completion{
		{id: ids[0], token: "ta", value: []byte(`{"r":1}`), nextToken: "tn"},
		{id: ids[1], token: "wrong", value: null},
		{id: "nope", token: "t", value: null},
		{id: ids[2], token: "tc", value: null},
		{id: ids[1], token: "tb", value: null},
	}
	q.completionCall(ctx, batch)() // one script call for all five
	require.NoError(t, batch[0].err)
	require.NotNil(t, batch[0].res.job)
	require.Equal(t, ids[3], batch[0].res.job.ID, "the first completion took the next job")
	require.ErrorIs(t, batch[1].err, ErrLockLost)
	require.ErrorIs(t, batch[2].err, ErrNotFound)
	require.ErrorContains(t, batch[3].err, "WRONGTYPE")
	require.NoError(t, batch[4].err, "a failing completion does not end the others")
	require.Nil(t, batch[4].res.job)

	c, err := q.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, Counts{Active: 2, Completed: 2}, c) // c (untouched) and d
	a, err := q.Get(ctx, ids[0])
	require.NoError(t, err)
	require.JSONEq(t, `{"r":1}`, string(a.ReturnValue))
}

func TestPruneLib_KeepsWhatAScriptUsesTransitively(t *testing.T) {
	t.Parallel()
	lib := "--[[ header ]]\nlocal rcall = redis.call\n\n-- a reads x.\nlocal function a()\n  -- c() in a comment\n  return rcall(\"GET\", \"x\")\nend\n\n" +
		"local function b() return a() end\n\nlocal function c() return 1 end\n\nlocal function d() return c() end\n"
	got := pruneLib(lib, "local t = { d = 1 }\nreturn b() .. t.c .. \"c()\" -- d()\n")
	require.Contains(t, got, "local rcall = redis.call")
	require.Contains(t, got, "-- a reads x.\nlocal function a()\n  -- c() in a comment\n")
	require.Contains(t, got, "local function b()")
	require.NotContains(t, got, "local function c()", "named only in a comment, a string, a field and a key")
	require.NotContains(t, got, "local function d()")
	require.NotContains(t, got, "header")

	require.Contains(t, scriptSource("complete.lua"), "local function finish(")
	require.Contains(t, scriptSource("fetch.lua"), "local function takeNext(")
	require.NotContains(t, scriptSource("fetch.lua"), "local function finish(")
	require.NotContains(t, scriptSource("add.lua"), "local function schedulerOnTake(")
}

func TestCompletionBatcher_BalancesTheSecondCall(t *testing.T) {
	t.Parallel()
	var b completionBatcher
	gate := make(chan struct{}) // one send lets one call finish
	var mu sync.Mutex
	var calls [][]string
	run := func(_ context.Context, batch []*completion) func() {
		var ids []string
		for _, c := range batch {
			ids = append(ids, c.id)
		}
		mu.Lock()
		calls = append(calls, ids)
		mu.Unlock()
		<-gate
		return func() {}
	}
	ctx := context.Background()
	done := make(chan string, 16)
	start := func(id string) {
		go func() {
			c := &completion{id: id}
			assert.NoError(t, b.do(ctx, c, run))
			done <- id
		}()
	}
	state := func() (inflight, pending int) {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.inflight, len(b.pending)
	}
	callsSoFar := func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(calls)
	}

	// With nothing in flight a completion goes at once, alone.
	start("a")
	require.Eventually(t, func() bool { n, _ := state(); return n == 1 }, time.Second, time.Millisecond)
	// Lately 8 completions cycled: with a call in flight, a second one
	// starts once 4 wait, not before.
	b.mu.Lock()
	b.work = 8
	b.mu.Unlock()
	for _, id := range []string{"b", "c", "d"} {
		start(id)
	}
	require.Eventually(t, func() bool { _, p := state(); return p == 3 }, time.Second, time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if n, p := state(); n != 1 || p != 3 {
		t.Fatalf("3 of 8 waiting started a call: %d in flight, %d waiting", n, p)
	}
	start("e")
	require.Eventually(t, func() bool { n, p := state(); return n == 2 && p == 0 }, time.Second, time.Millisecond)

	// Fewer than the threshold wait for the call in flight to return.
	start("f")
	start("g")
	require.Eventually(t, func() bool { _, p := state(); return p == 2 }, time.Second, time.Millisecond)
	gate <- struct{}{} // "a" returns: one call in flight, 2 of 4 waiting
	require.Equal(t, "a", <-done)
	if n, p := state(); n != 1 || p != 2 {
		t.Fatalf("after a call returned with 2 of 4 waiting: %d in flight, %d waiting", n, p)
	}
	gate <- struct{}{} // "b".."e" return: nothing in flight, so "f" and "g" go
	for range 4 {
		<-done
	}
	require.Eventually(t, func() bool { n, p := state(); return n == 1 && p == 0 }, time.Second, time.Millisecond)
	gate <- struct{}{}
	for range 2 {
		<-done
	}
	got := callsSoFar()
	for _, ids := range got {
		slices.Sort(ids) // the goroutines reach the batcher in any order
	}
	require.Equal(t, [][]string{{"a"}, {"b", "c", "d", "e"}, {"f", "g"}}, got)
	n, p := state()
	require.Zero(t, n+p)
	require.Zero(t, b.inflightJobs)
}

func TestCompletionBatcher_WorkEstimateFollowsLoad(t *testing.T) {
	var b completionBatcher
	b.mu.Lock()
	defer b.mu.Unlock()
	// 16 completions in flight and waiting at once set the estimate...
	b.pending = make([]*completion, 10)
	b.started(6)
	require.Equal(t, 16, b.work)
	require.Equal(t, 8, b.threshold())
	// ...which decays by a sixteenth per call (at least one) while the load
	// is lower.
	b.pending, b.inflight, b.inflightJobs = nil, 0, 0
	for range 11 {
		b.started(1)
		b.inflight, b.inflightJobs = 0, 0
	}
	require.Equal(t, 5, b.work)
	require.Equal(t, 2, b.threshold())
	b.work = 1000
	require.Equal(t, maxCompletionBatch, b.threshold(), "never more than one call can carry")
}

func FuzzParseOpts_SameAsAMapDecode(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `[]`, `"x"`, `{"attempts":0,"delay":0}`,
		`{"attempts":3,"backoff":{"type":"exponential","delay":1000},"removeOnComplete":{"age":3600,"count":10}}`,
		` { "attempts" : 2 , "backoff" : 500 , "priority":7} `,
		`{"attempts":1,"attempts":"x"}`, `{"backoff":5,"backoff":"junk"}`, `{"repeat":{"a":1},"repeat":{"b":2}}`,
		`{"de":{"id":"a\"b"},"jobId":"x,y}z","removeOnFail":true}`, `{"att\u0065mpts":4}`, `{"a\"b":1,"attempts":2}`,
		`{"x":[1,{"y":"]}"},[]],"attempts":5}`, `{"attempts":1e2}`, `{"attempts":-0.5}`, `{`, `{"attempts":}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, gotErr := parseOpts(raw)
		want, wantErr := parseOptsViaMap(raw)
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("parseOpts(%q) error %v, map decode error %v", raw, gotErr, wantErr)
		}
		if gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("parseOpts(%q)\n got %+v\nwant %+v", raw, got, want)
		}
	})
}

func TestEachMember_ReadsPlainObjectsInPlace(t *testing.T) {
	var keys, values []string
	ok := eachMember(` {"a":1, "b" : {"c":[1,"}"]} ,"d":"x\"y","e":null}`, func(k, v string) {
		keys, values = append(keys, k), append(values, v)
	})
	require.True(t, ok)
	require.Equal(t, []string{"a", "b", "d", "e"}, keys)
	require.Equal(t, []string{`1`, `{"c":[1,"}"]}`, `"x\"y"`, `null`}, values)
	for _, doc := range []string{`[]`, `"s"`, `{"k\u0065y":1}`} {
		require.False(t, eachMember(doc, func(string, string) {}), doc)
	}
}

// BenchmarkParseOpts compares the in-place reading with a map decode on
// the opts of a plain job and of one with every option.
func BenchmarkParseOpts(b *testing.B) {
	for _, opts := range []struct{ name, raw string }{
		{"plain", `{"attempts":0,"delay":0}`},
		{"full", `{"attempts":3,"delay":0,"jobId":"gh-1","backoff":{"type":"exponential","delay":60000},"removeOnComplete":{"age":86400},"removeOnFail":true,"de":{"id":"r#1","ttl":600000}}`},
	} {
		b.Run(opts.name+"/in-place", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parseOpts(opts.raw); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(opts.name+"/map", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parseOptsViaMap(opts.raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// parseCron expands fields as cron-parser 4.9.0 does (the expectations are
// its own): a day-of-week range ending in 7 lists Sunday as 0, and a step
// counts values already listed.
func TestParseCron_AsCronParser(t *testing.T) {
	t.Parallel()
	s, err := parseCron("5 */20 1-7/3 ? jan,MAR */2")
	require.NoError(t, err)
	require.Equal(t, []int{5}, s.second)
	require.Equal(t, []int{0, 20, 40}, s.minute)
	require.Equal(t, []int{1, 4, 7}, s.hour)
	require.Len(t, s.dom, 31)
	require.Equal(t, []int{1, 3}, s.month)
	require.Equal(t, []int{0, 2, 4, 6}, s.dow)
	s, err = parseCron("0 0 * * 1-7")
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, s.dow)
	s, err = parseCron("0 0 30 2 *")
	require.NoError(t, err)
	require.Empty(t, s.dom, "February has no 30th")
	_, err = cronNext(s, time.UTC, time.Now())
	require.Error(t, err, "never fires")
	s, err = parseCron("0 0 1,31 4 *")
	require.NoError(t, err)
	require.Equal(t, []int{1}, s.dom, "days the only month lacks are dropped")
	_, err = parseCron("0 0 * * 5L")
	require.ErrorContains(t, err, "not supported")
}
