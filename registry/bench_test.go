package registry

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
)

// BenchmarkReadLive1000 reads a 1,000-host registry. A counting hook proves one
// round trip per read.
func BenchmarkReadLive1000(b *testing.B) {
	db := livetest.Valkey(b)
	seedRows(b, db.Client, 1000)
	c := clientOf(b, db.Client, nil)
	hook := &countingHook{}
	c.AddHook(hook)
	ctx := context.Background()
	if _, err := ReadLive(ctx, c, 0); err != nil { // loads the script
		b.Fatal(err)
	}
	hook.n.Store(0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		hosts, err := ReadLive(ctx, c, 0)
		if err != nil {
			b.Fatal(err)
		}
		if len(hosts) != 1000 {
			b.Fatalf("read %d hosts, want 1000", len(hosts))
		}
	}
	b.StopTimer()
	if got := hook.n.Load(); got != int64(b.N) {
		b.Fatalf("%d commands for %d reads: not one round trip each", got, b.N)
	}
	b.ReportMetric(float64(hook.n.Load())/float64(b.N), "roundtrips/op")
}

// The benchmarks below named Original* re-implement the command pattern of the
// original's registry (docs/benchmarks-history.md, "Registry read, heartbeat and lease acquire"): the same
// commands, sent from Go against the same server. They are not the original
// (Node, ioredis) itself; they exist to give our figures a ratio.

// BenchmarkOriginalReadLive1000 re-implements the original's readLiveHosts on
// a 1,000-host registry: SMEMBERS host:live, then one HGETALL per member, each
// row parsed as ours is. The original's source does not say whether the
// HGETALLs went out one by one or together, so both are measured: sequential
// (1 + 1,000 round trips) and pipelined (2 round trips).
func BenchmarkOriginalReadLive1000(b *testing.B) {
	for _, mode := range []struct {
		name       string
		pipelined  bool
		roundTrips int64
	}{{"sequential", false, 1001}, {"pipelined", true, 2}} {
		b.Run(mode.name, func(b *testing.B) {
			db := livetest.Valkey(b)
			seedRows(b, db.Client, 1000)
			c := clientOf(b, db.Client, nil)
			hook := &countingHook{}
			c.AddHook(hook)
			ctx := context.Background()
			read := func() []Host {
				hosts, err := originalReadLive(ctx, c, mode.pipelined)
				if err != nil {
					b.Fatal(err)
				}
				return hosts
			}
			read()
			hook.n.Store(0)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if hosts := read(); len(hosts) != 1000 {
					b.Fatalf("read %d hosts, want 1000", len(hosts))
				}
			}
			b.StopTimer()
			if got := hook.n.Load(); got != mode.roundTrips*int64(b.N) {
				b.Fatalf("%d round trips for %d reads, want %d each", got, b.N, mode.roundTrips)
			}
			b.ReportMetric(float64(hook.n.Load())/float64(b.N), "roundtrips/op")
		})
	}
}

// originalReadLive is the original's read: the members, then each row by
// HGETALL, parsed into Hosts (ages on the reader's clock, as the original
// judged them) and sorted by name.
func originalReadLive(ctx context.Context, c *redis.Client, pipelined bool) ([]Host, error) {
	members, err := c.SMembers(ctx, LiveKey).Result()
	if err != nil {
		return nil, err
	}
	rows := make([]*redis.MapStringStringCmd, len(members))
	if pipelined {
		pipe := c.Pipeline()
		for i, m := range members {
			rows[i] = pipe.HGetAll(ctx, HostKey(m))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, err
		}
	} else {
		for i, m := range members {
			rows[i] = c.HGetAll(ctx, HostKey(m))
			if err := rows[i].Err(); err != nil {
				return nil, err
			}
		}
	}
	now := time.Now().UnixMilli()
	hosts := make([]Host, 0, len(members))
	for i, m := range members {
		row := rows[i].Val()
		if len(row) == 0 {
			continue // the original SREMs such a member; the seed has none
		}
		var vals rowValues
		for j, f := range rowFields {
			vals[j] = row[f]
		}
		hosts = append(hosts, parseRow(m, &vals, now))
	}
	slices.SortFunc(hosts, func(a, b Host) int { return cmp.Compare(a.Name, b.Name) })
	return hosts, nil
}

// benchFacts are the facts of a typical routing host.
var benchFacts = Facts{
	Image:       Value("pi-job:latest"),
	ImageDigest: Value("sha256:" + strings.Repeat("ab", 32)),
	Concurrency: Value(3),
	Routes:      Value(true),
	Caps:        Value("s:prod,w:jira"),
	TZ:          Value("Europe/Amsterdam"),
	FPCron:      Value("0123456789abcdef"),
	CronCount:   Value(2),
}

// BenchmarkBeat is one heartbeat of ours (Publish): the name claim, the row,
// its TTL and the live member, written by one script in one round trip.
func BenchmarkBeat(b *testing.B) {
	db := livetest.Valkey(b)
	c := clientOf(b, db.Client, nil)
	hook := &countingHook{}
	c.AddHook(hook)
	r, err := New(c, "bench-host", benchFacts, Config{Version: "1.2.3"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Publish(ctx); err != nil { // loads the script, takes the name
		b.Fatal(err)
	}
	hook.n.Store(0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := r.Publish(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if got := hook.n.Load(); got != int64(b.N) {
		b.Fatalf("%d commands for %d beats: not one round trip each", got, b.N)
	}
	b.ReportMetric(float64(hook.n.Load())/float64(b.N), "roundtrips/op")
}

// BenchmarkOriginalBeat re-implements the original's heartbeat: HSET of the
// row, PEXPIRE 90000 and SADD host:live, three sequential commands (not MULTI),
// with the same fields as BenchmarkBeat (and no name claim, which the original
// did not have).
func BenchmarkOriginalBeat(b *testing.B) {
	db := livetest.Valkey(b)
	c := clientOf(b, db.Client, nil)
	hook := &countingHook{}
	c.AddHook(hook)
	r, err := New(c, "bench-host", benchFacts, Config{Version: "1.2.3"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const name = "bench-host"
	key := HostKey(name)
	started := strconv.FormatInt(time.Now().UnixMilli(), 10)
	beat := func() {
		// The row's values, evaluated as ours are at every beat; the
		// original's clock was the writer's.
		args := append([]any{FieldBeatAt, strconv.FormatInt(time.Now().UnixMilli(), 10), FieldStartedAt, started}, r.rowArgs()...)
		if err := c.HSet(ctx, key, args...).Err(); err != nil {
			b.Fatal(err)
		}
		if err := c.PExpire(ctx, key, DefaultTTL).Err(); err != nil {
			b.Fatal(err)
		}
		if err := c.SAdd(ctx, LiveKey, name).Err(); err != nil {
			b.Fatal(err)
		}
	}
	beat()
	hook.n.Store(0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		beat()
	}
	b.StopTimer()
	if got := hook.n.Load(); got != 3*int64(b.N) {
		b.Fatalf("%d commands for %d beats, want 3 each", got, b.N)
	}
	b.ReportMetric(float64(hook.n.Load())/float64(b.N), "roundtrips/op")
}
