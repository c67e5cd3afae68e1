package registry

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

// TestReadLive_HostileRows writes rows by hand as a hostile or broken peer
// would: the good rows come back intact, bad values are emptied and listed,
// bad names are dropped, ghosts are pruned, and nothing panics.
func TestReadLive_HostileRows(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	logs := &logtest.Buffer{}
	c := db.Client

	good := newRegistry(t, c, "good", staticFacts(), fastConfig(logs))
	require.NoError(t, good.Publish(ctx))
	server, err := c.Time(ctx).Result()
	require.NoError(t, err)
	now := strconv.FormatInt(server.UnixMilli(), 10)

	put := func(member string, fields ...string) {
		t.Helper()
		if len(fields) > 0 {
			args := make([]any, len(fields))
			for i, f := range fields {
				args[i] = f
			}
			require.NoError(t, c.HSet(ctx, HostKey(member), args...).Err())
		}
		require.NoError(t, c.SAdd(ctx, LiveKey, member).Err())
	}
	huge := strings.Repeat("x", 1<<20)
	put("bad name!", FieldBeatAt, now)
	put("bad\x00nul", FieldBeatAt, now)
	put("bad\xff\xfeutf8", FieldBeatAt, now)
	put(strings.Repeat("n", 5000), FieldBeatAt, now)
	put("prod.json", FieldBeatAt, now)
	put("junkcaps", FieldBeatAt, now, FieldCaps, "s:ok,,x:bad,s:bad name,w:also-ok,s:a:b,"+strings.Repeat("w", 100))
	put("huge", FieldBeatAt, now, FieldVersion, huge, FieldCaps, huge, FieldConcurrency, "4")
	put("nobeat", FieldBeatAt, "12abc", FieldConcurrency, "2")
	put("future", FieldBeatAt, strconv.FormatInt(server.Add(time.Hour).UnixMilli(), 10))
	put("negative", FieldBeatAt, "-5", FieldPid, "-5", FieldConcurrency, " 3", FieldCronCount, "99999999999999999999")
	put("shapes", FieldBeatAt, now, FieldTZ, "../../etc/passwd", FieldImage, "ghcr.io/x/y:1",
		FieldImageDigest, "md5:abc", FieldRoutes, "yes", FieldFPCron, "ZZZZ", FieldInstance, "x",
		FieldName, "someone-else", "unknownField", huge)
	put("manyfields", append([]string{FieldBeatAt, now}, manyFields(2000)...)...)
	put("ghost")
	require.NoError(t, c.Set(ctx, HostKey("stringrow"), "not a hash", 0).Err())
	put("stringrow")

	hosts, err := good.ReadLive(ctx)
	require.NoError(t, err)
	byName := map[string]Host{}
	for _, h := range hosts {
		byName[h.Name] = h
	}
	names := make([]string, 0, len(hosts))
	for _, h := range hosts {
		names = append(names, h.Name)
	}
	require.Equal(t, []string{"future", "good", "huge", "junkcaps", "manyfields", "negative", "nobeat", "shapes"}, names)

	g := byName["good"]
	require.Empty(t, g.Problems)
	require.Equal(t, "s:prod,w:jira", g.Caps)

	jc := byName["junkcaps"]
	require.Equal(t, "s:ok,w:also-ok", jc.Caps)
	require.Contains(t, jc.Problems, "caps: junk tokens dropped")
	require.True(t, jc.AgeKnown)

	h := byName["huge"]
	require.Empty(t, h.Version)
	require.Empty(t, h.Caps)
	require.Equal(t, 4, h.Concurrency, "the other fields of a row with one oversized value survive")
	require.Contains(t, h.Problems, "version: too long")
	require.Contains(t, h.Problems, "caps: too long")

	nb := byName["nobeat"]
	require.False(t, nb.AgeKnown)
	require.True(t, nb.BeatAt.IsZero())
	require.Equal(t, 2, nb.Concurrency)

	require.False(t, byName["future"].AgeKnown)
	require.Contains(t, byName["future"].Problems, "beatAt: in the future")

	neg := byName["negative"]
	require.False(t, neg.AgeKnown)
	require.Zero(t, neg.Pid)
	require.Zero(t, neg.Concurrency)
	require.Zero(t, neg.CronCount)
	require.Len(t, neg.Problems, 4)

	sh := byName["shapes"]
	require.Empty(t, sh.TZ)
	require.Empty(t, sh.Image)
	require.Empty(t, sh.ImageDigest)
	require.False(t, sh.Routes)
	require.Equal(t, InvalidFingerprint, sh.FPCron, "junk fpCron must disagree, never abstain")
	require.Empty(t, sh.Instance)
	require.Contains(t, sh.Problems, "name: differs from the row's key")
	require.Len(t, sh.Problems, 7)

	require.True(t, byName["manyfields"].AgeKnown)

	members := c.SMembers(ctx, LiveKey).Val()
	require.NotContains(t, members, "ghost", "member without a row not pruned")
	require.NotContains(t, members, "stringrow", "member whose key is not a hash not pruned")
	require.Contains(t, members, "bad name!", "a row that exists is not pruned, only ignored")

	refused := logs.Events(t, "host_registry_row_refused")
	require.Len(t, refused, 5)
	_, err = good.ReadLive(ctx)
	require.NoError(t, err)
	require.Len(t, logs.Events(t, "host_registry_row_refused"), 5, "a refused row is logged once, not per read")
}

func manyFields(n int) []string {
	out := make([]string, 0, 2*n)
	for i := range n {
		out = append(out, "f"+strconv.Itoa(i), strings.Repeat("v", 100))
	}
	return out
}

// TestReadLive_NoHostsIsNotUnreachable keeps the two answers apart.
func TestReadLive_NoHostsIsNotUnreachable(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)

	hosts, err := ReadLive(ctx, db.Client, 0)
	require.NoError(t, err)
	require.NotNil(t, hosts)
	require.Empty(t, hosts)

	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer down.Close()
	hosts, err = ReadLive(ctx, down, time.Second)
	require.ErrorIs(t, err, ErrUnreachable)
	require.Nil(t, hosts)
	var netErr *net.OpError
	require.ErrorAs(t, err, &netErr, "the cause is wrapped")

	// A corrupt index key is unreadable, not empty.
	require.NoError(t, db.Client.Set(ctx, LiveKey, "junk", 0).Err())
	_, err = ReadLive(ctx, db.Client, 0)
	require.ErrorIs(t, err, ErrUnreachable)
}

// TestReadLive_OneRoundTrip counts commands: a read of many rows is one.
func TestReadLive_OneRoundTrip(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	seedRows(t, db.Client, 50)
	c := clientOf(t, db.Client, nil)
	hook := &countingHook{}
	c.AddHook(hook)

	_, err := ReadLive(ctx, c, 0) // loads the script (EVALSHA, then EVAL once)
	require.NoError(t, err)
	hook.n.Store(0)
	for range 5 {
		hosts, err := ReadLive(ctx, c, 0)
		require.NoError(t, err)
		require.Len(t, hosts, 50)
	}
	require.Equal(t, int64(5), hook.n.Load())
}

// seedRows writes n valid rows dated by the server's clock.
func seedRows(t testing.TB, c *redis.Client, n int) {
	t.Helper()
	ctx := context.Background()
	server, err := c.Time(ctx).Result()
	require.NoError(t, err)
	now := strconv.FormatInt(server.UnixMilli(), 10)
	pipe := c.Pipeline()
	for i := range n {
		name := "host-" + strconv.Itoa(i)
		pipe.HSet(ctx, HostKey(name),
			FieldName, name, FieldBeatAt, now, FieldStartedAt, now, FieldVersion, "1.2.3",
			FieldImage, "pi-job:latest", FieldImageDigest, "sha256:"+strings.Repeat("ab", 32),
			FieldConcurrency, "3", FieldPid, "1234", FieldInstance, strings.Repeat("0", 32),
			FieldRoutes, "true", FieldCaps, "s:prod,w:jira", FieldTZ, "Europe/Amsterdam",
			FieldFPCron, "0123456789abcdef", FieldCronCount, "2")
		pipe.PExpire(ctx, HostKey(name), time.Hour)
		pipe.SAdd(ctx, LiveKey, name)
	}
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)
}

func TestParseRow_NeverPanics(t *testing.T) {
	t.Parallel()
	inputs := []string{"", "0", "-1", "1e3", "0x10", "99999999999999999999", "\x00", "\xff", "true", " ", "１２"}
	for _, v := range inputs {
		var vals rowValues
		for i := range vals {
			vals[i] = v
		}
		h := parseRow("n", &vals, 1_700_000_000_000)
		require.Equal(t, "n", h.Name)
	}
}

// FuzzParseRow: any row a peer could write yields a defined Host.
func FuzzParseRow(f *testing.F) {
	f.Add("1700000000000", "s:a,w:b", "Europe/Amsterdam", "3", "0123456789abcdef")
	f.Add("x", "\x00", "/", "-1", "")
	f.Fuzz(func(t *testing.T, beat, caps, tz, conc, fp string) {
		var vals rowValues
		for f, v := range map[string]string{FieldBeatAt: beat, FieldCaps: caps, FieldTZ: tz, FieldConcurrency: conc, FieldFPCron: fp} {
			vals[fieldIndex[f]] = v
		}
		h := parseRow("n", &vals, 1_700_000_000_000)
		if h.AgeKnown && h.Age < 0 {
			t.Fatalf("negative age %s", h.Age)
		}
		if h.TZ != "" && refuseRule(FieldTZ, h.TZ) != "" {
			t.Fatalf("refused tz kept: %q", h.TZ)
		}
		if h.FPCron != "" && h.FPCron != InvalidFingerprint && refuseRule(FieldFPCron, h.FPCron) != "" {
			t.Fatalf("refused fpCron kept: %q", h.FPCron)
		}
	})
}

// TestParseRow_AgeFromServerTime: age is the server's now minus the row's
// beatAt, both server clock readings; the reader's clock plays no part (a row
// from 2001 read at a server time of 2001 plus a minute is a minute old).
func TestParseRow_AgeFromServerTime(t *testing.T) {
	t.Parallel()
	const beat = 1_000_000_000_000 // September 2001
	tests := []struct {
		name     string
		now      int64
		wantAge  time.Duration
		wantKnow bool
	}{
		{"minute old", beat + 60_000, time.Minute, true},
		{"just now", beat, 0, true},
		{"slightly ahead after a failover", beat - 500, 0, true},
		{"far in the future", beat - 60_000, 0, false},
	}
	for _, tt := range tests {
		var vals rowValues
		vals[fieldIndex[FieldBeatAt]] = strconv.FormatInt(beat, 10)
		h := parseRow("n", &vals, tt.now)
		require.Equal(t, tt.wantKnow, h.AgeKnown, tt.name)
		require.Equal(t, tt.wantAge, h.Age, tt.name)
		require.Equal(t, int64(beat), h.BeatAt.UnixMilli(), tt.name)
	}
}
