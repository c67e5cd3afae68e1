package registry

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fastConfig beats often, so a test sees many beats quickly. The TTL leaves
// room for a slow beat on a loaded machine.
func fastConfig(logs *logtest.Buffer) Config {
	return Config{TTL: 2 * time.Second, Interval: 40 * time.Millisecond, Version: "1.2.3", Logger: logs.Logger()}
}

func staticFacts() Facts {
	return Facts{
		Image:       Value("pi-job:latest"),
		ImageDigest: Value("sha256:" + strings.Repeat("ab", 32)),
		Concurrency: Value(3),
		Routes:      Value(true),
		Caps:        Value("s:prod,w:jira"),
		TZ:          Value("Europe/Amsterdam"),
		FPCron:      Value("0123456789abcdef"),
		CronCount:   Value(2),
	}
}

func newRegistry(t testing.TB, c redis.UniversalClient, name string, facts Facts, cfg Config) *Registry {
	t.Helper()
	r, err := New(c, name, facts, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

func TestNew_RefusesBadInput(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()

	_, err := New(c, "bad name", Facts{}, Config{})
	var ne *fleet.NameError
	require.ErrorAs(t, err, &ne)

	_, err = New(nil, "ok", Facts{}, Config{})
	require.Error(t, err)

	_, err = New(c, "ok", Facts{}, Config{TTL: time.Second, Interval: 2 * time.Second})
	require.ErrorContains(t, err, "must exceed Interval")

	r, err := New(c, "ok", Facts{}, Config{})
	require.NoError(t, err)
	require.Equal(t, DefaultTTL, r.cfg.TTL)
	require.Equal(t, DefaultInterval, r.cfg.Interval)
	require.Equal(t, DefaultCallTimeout, r.cfg.CallTimeout)
	require.Equal(t, os.Getpid(), r.cfg.Pid)
	require.Regexp(t, `^[0-9a-f]{32}$`, r.Instance())
}

// TestRegistry_BeatNeverLeavesARowWithoutTTL samples the row's PTTL while a
// fast beat runs: it is positive every time. Then the beat goroutine is stopped
// without a leave (its ctx cancelled, as in a crash): the row and the claim
// expire at their TTL and a reader prunes the member.
func TestRegistry_BeatNeverLeavesARowWithoutTTL(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	logs := &logtest.Buffer{}
	cfg := fastConfig(logs)
	cfg.TTL = time.Second
	r := newRegistry(t, db.Client, "mini1", staticFacts(), cfg)

	beatCtx, crash := context.WithCancel(ctx)
	require.NoError(t, r.Start(beatCtx))

	firstBeat := db.Client.HGet(ctx, HostKey("mini1"), FieldBeatAt).Val()
	deadline := time.Now().Add(600 * time.Millisecond)
	samples := 0
	for time.Now().Before(deadline) {
		pttl, err := db.Client.PTTL(ctx, HostKey("mini1")).Result()
		require.NoError(t, err)
		require.Positive(t, pttl, "row without a TTL after %d samples", samples)
		require.LessOrEqual(t, pttl, time.Second)
		claimTTL, err := db.Client.PTTL(ctx, ClaimKey("mini1")).Result()
		require.NoError(t, err)
		require.Positive(t, claimTTL)
		samples++
		time.Sleep(5 * time.Millisecond)
	}
	require.NotEqual(t, firstBeat, db.Client.HGet(ctx, HostKey("mini1"), FieldBeatAt).Val(), "the beat did not repeat")
	require.True(t, db.Client.SIsMember(ctx, LiveKey, "mini1").Val())

	crash()
	require.Eventually(t, func() bool {
		select {
		case <-r.done:
			return true
		default:
			return false
		}
	}, time.Second, 5*time.Millisecond, "beat goroutine did not stop")

	require.Eventually(t, func() bool {
		return db.Client.Exists(ctx, HostKey("mini1"), ClaimKey("mini1")).Val() == 0
	}, 3*time.Second, 10*time.Millisecond, "row outlived its TTL")
	require.True(t, db.Client.SIsMember(ctx, LiveKey, "mini1").Val(), "the set keeps the ghost until a reader prunes it")

	hosts, err := r.ReadLive(ctx)
	require.NoError(t, err)
	require.Empty(t, hosts)
	require.NotNil(t, hosts, "no hosts is an empty slice, not nil")
	require.False(t, db.Client.SIsMember(ctx, LiveKey, "mini1").Val(), "ghost member not pruned")
	logs.EveryLineHasHost(t, "mini1")
}

// TestRegistry_CloseLeavesCleanly deletes the row, the member and the claim,
// stops the goroutine, and is idempotent.
func TestRegistry_CloseLeavesCleanly(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	logs := &logtest.Buffer{}
	r := newRegistry(t, db.Client, "mini1", staticFacts(), fastConfig(logs))
	require.NoError(t, r.Start(ctx))
	require.Equal(t, int64(2), db.Client.Exists(ctx, HostKey("mini1"), ClaimKey("mini1")).Val())

	require.NoError(t, r.Close(ctx))
	select {
	case <-r.done:
	default:
		t.Fatal("Close returned before the beat goroutine stopped")
	}
	require.Zero(t, db.Client.Exists(ctx, HostKey("mini1"), ClaimKey("mini1")).Val())
	require.False(t, db.Client.SIsMember(ctx, LiveKey, "mini1").Val())

	require.NoError(t, r.Close(ctx), "second Close")
	require.ErrorIs(t, r.Publish(ctx), ErrClosed)
	require.ErrorIs(t, r.Start(ctx), ErrClosed)
	time.Sleep(100 * time.Millisecond)
	require.Zero(t, db.Client.Exists(ctx, HostKey("mini1")).Val(), "a beat ran after Close")
}

// TestRegistry_RowFields publishes every fixed field and reads it back typed.
func TestRegistry_RowFields(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	logs := &logtest.Buffer{}
	cfg := fastConfig(logs)
	cfg.Pid = 4242
	key, err := fleet.NewKey([]byte("a fleet key of at least 32 bytes, for the test"))
	require.NoError(t, err)
	cfg.FleetKey = key
	r := newRegistry(t, db.Client, "mini1", staticFacts(), cfg)
	require.NoError(t, r.Publish(ctx))

	raw := db.Client.HGetAll(ctx, HostKey("mini1")).Val()
	for _, f := range rowFields {
		require.Contains(t, raw, f)
	}
	require.Len(t, raw, len(rowFields))
	hosts, err := ReadLive(ctx, db.Client, 0)
	require.NoError(t, err)
	require.Len(t, hosts, 1)
	require.True(t, hosts[0].SignedBy(key), "the row carries the key's signature")
	require.False(t, Trust(hosts, key, nil)[0].Untrusted)
	defer func() {
		require.NoError(t, db.Client.HSet(ctx, HostKey("mini1"), FieldCaps, "s:stolen").Err())
		hosts, err = ReadLive(ctx, db.Client, 0)
		require.NoError(t, err)
		require.True(t, Trust(hosts, key, nil)[0].Untrusted, "a row changed by a party without the key")
	}()
	require.Equal(t, "true", raw[FieldRoutes])
	require.Equal(t, "4242", raw[FieldPid])
	require.Equal(t, raw[FieldBeatAt], raw[FieldStartedAt], "first beat: startedAt is its beatAt")

	hosts, err = r.ReadLive(ctx)
	require.NoError(t, err)
	require.Len(t, hosts, 1)
	h := hosts[0]
	require.Empty(t, h.Problems)
	require.Equal(t, "mini1", h.Name)
	require.True(t, h.AgeKnown)
	require.Less(t, h.Age, 30*time.Second, "the beat is in the server's milliseconds, not another unit")
	require.Equal(t, "1.2.3", h.Version)
	require.Equal(t, "pi-job:latest", h.Image)
	require.Equal(t, "sha256:"+strings.Repeat("ab", 32), h.ImageDigest)
	require.Equal(t, 3, h.Concurrency)
	require.Equal(t, 4242, h.Pid)
	require.Equal(t, r.Instance(), h.Instance)
	require.True(t, h.Routes)
	require.Equal(t, "s:prod,w:jira", h.Caps)
	require.Equal(t, "Europe/Amsterdam", h.TZ)
	require.Equal(t, "0123456789abcdef", h.FPCron)
	require.Equal(t, 2, h.CronCount)
	require.False(t, h.StartedAt.IsZero())

	time.Sleep(5 * time.Millisecond)
	require.NoError(t, r.Publish(ctx))
	again := db.Client.HGetAll(ctx, HostKey("mini1")).Val()
	require.Equal(t, raw[FieldStartedAt], again[FieldStartedAt], "startedAt must survive later beats")

	ch := CapabilityHosts(hosts)
	require.Len(t, ch, 1)
	require.Equal(t, "mini1", ch[0].Name)
	require.Equal(t, "s:prod,w:jira", ch[0].Caps)
	require.True(t, ch[0].Routes)
	require.True(t, ch[0].AgeKnown)
}

// TestRegistry_SkewedLocalClock: a host whose local clock is hours off is read
// as fresh, because beatAt is the server's TIME and age is measured against the
// server's TIME. A row whose beatAt is three hours old by the server reads as
// three hours old, whatever the reader's clock.
func TestRegistry_SkewedLocalClock(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	logs := &logtest.Buffer{}
	cfg := fastConfig(logs)
	cfg.NowFunc = func() time.Time { return time.Now().Add(-7 * time.Hour) }
	skewed := newRegistry(t, db.Client, "skewed", staticFacts(), cfg)
	require.NoError(t, skewed.Publish(ctx))

	server, err := db.Client.Time(ctx).Result()
	require.NoError(t, err)
	beatAt, err := strconv.ParseInt(db.Client.HGet(ctx, HostKey("skewed"), FieldBeatAt).Val(), 10, 64)
	require.NoError(t, err)
	require.InDelta(t, server.UnixMilli(), beatAt, 1000, "beatAt is not the server's time")

	// A peer that beat three hours ago by the server's clock.
	old := server.Add(-3 * time.Hour).UnixMilli()
	require.NoError(t, db.Client.HSet(ctx, HostKey("old"), FieldName, "old", FieldBeatAt, strconv.FormatInt(old, 10)).Err())
	require.NoError(t, db.Client.SAdd(ctx, LiveKey, "old").Err())

	hosts, err := ReadLive(ctx, db.Client, 0)
	require.NoError(t, err)
	require.Len(t, hosts, 2)
	require.Equal(t, "old", hosts[0].Name)
	require.True(t, hosts[0].AgeKnown)
	require.InDelta(t, float64(3*time.Hour), float64(hosts[0].Age), float64(2*time.Second))
	require.Equal(t, "skewed", hosts[1].Name)
	require.True(t, hosts[1].AgeKnown)
	require.Less(t, hosts[1].Age, 2*time.Second, "a skewed writer must read as fresh")
}

// TestRegistry_FactsReevaluatedEveryBeat changes facts at run time and sees
// each Publish carry the new values; failing and panicking facts publish empty
// and are logged once.
func TestRegistry_FactsReevaluatedEveryBeat(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	logs := &logtest.Buffer{}
	var conc atomic.Int64
	conc.Store(3)
	var fp atomic.Value
	fp.Store("")
	var digestFails atomic.Bool
	facts := staticFacts()
	facts.Concurrency = func() (int, error) { return int(conc.Load()), nil }
	facts.FPCron = func() (string, error) { return fp.Load().(string), nil }
	facts.ImageDigest = func() (string, error) {
		if digestFails.Load() {
			return "", errors.New("docker is down")
		}
		return "sha256:" + strings.Repeat("cd", 32), nil
	}
	facts.CronCount = func() (int, error) { panic("boom") }
	r := newRegistry(t, db.Client, "mini1", facts, fastConfig(logs))

	read := func() Host {
		t.Helper()
		require.NoError(t, r.Publish(ctx))
		hosts, err := r.ReadLive(ctx)
		require.NoError(t, err)
		require.Len(t, hosts, 1)
		return hosts[0]
	}
	h := read()
	require.Equal(t, 3, h.Concurrency)
	require.Empty(t, h.FPCron, "abstaining")
	require.Equal(t, "sha256:"+strings.Repeat("cd", 32), h.ImageDigest)
	require.Equal(t, "", db.Client.HGet(ctx, HostKey("mini1"), FieldCronCount).Val(), "a panicking fact publishes empty")

	conc.Store(7)
	fp.Store("fedcba9876543210")
	digestFails.Store(true)
	h = read()
	require.Equal(t, 7, h.Concurrency)
	require.Equal(t, "fedcba9876543210", h.FPCron)
	require.Empty(t, h.ImageDigest, "a failing fact publishes empty")
	read()
	read()
	require.Equal(t, 2, logs.Count(t, "host_registry_fact_failed"), "once for cronCount, once for imageDigest, across four beats")

	digestFails.Store(false)
	h = read()
	require.Equal(t, "sha256:"+strings.Repeat("cd", 32), h.ImageDigest)
	require.Equal(t, 1, logs.Count(t, "host_registry_fact_restored"))
	logs.EveryLineHasHost(t, "mini1")
}

// TestRegistry_ContentRule: path-, URL- and repository-shaped values and free
// text publish empty and are logged once per field and value across beats,
// without the value.
func TestRegistry_ContentRule(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	logs := &logtest.Buffer{}
	facts := staticFacts()
	facts.Image = Value("/etc/passwd")
	facts.TZ = Value("https://x")
	facts.FPCron = Value("not a fingerprint")
	facts.Caps = Value("s:prod,x:junk,w:jira,s:")
	cfg := fastConfig(logs)
	cfg.Version = "1.0 beta"
	r := newRegistry(t, db.Client, "mini1", facts, cfg)

	for range 4 {
		require.NoError(t, r.Publish(ctx))
	}
	row := db.Client.HGetAll(ctx, HostKey("mini1")).Val()
	require.Equal(t, "", row[FieldImage])
	require.Equal(t, "", row[FieldTZ])
	require.Equal(t, "", row[FieldFPCron])
	require.Equal(t, "", row[FieldVersion])
	require.Equal(t, "s:prod,w:jira", row[FieldCaps], "caps keep their valid tokens")

	refused := logs.Events(t, "host_registry_field_refused")
	byField := map[string]string{}
	for _, e := range refused {
		f := e["field"].(string)
		require.NotContains(t, byField, f, "field %s refused twice", f)
		byField[f] = e["rule"].(string)
	}
	require.Equal(t, map[string]string{
		FieldImage:   rulePath,
		FieldTZ:      ruleURL,
		FieldFPCron:  rulePrintable,
		FieldVersion: rulePrintable,
		FieldCaps:    ruleCapsToken,
	}, byField)
	require.NotContains(t, logs.String(), "passwd")
	require.NotContains(t, logs.String(), "https")

	// A repository name is refused with its own rule; a local tag passes.
	facts.Image = Value("ghcr.io/edgehero/pi-job:latest")
	r2 := newRegistry(t, db.Client, "mini2", facts, cfg)
	require.NoError(t, r2.Publish(ctx))
	require.Equal(t, "", db.Client.HGet(ctx, HostKey("mini2"), FieldImage).Val())
	require.Len(t, logs.Events(t, "host_registry_field_refused"), len(refused)+5)
}

func TestRefuseRule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		field, give, want string
	}{
		{FieldImage, "pi-job:latest", ""},
		{FieldImage, "pi-job@sha256:" + strings.Repeat("0", 64), ""},
		{FieldImage, "ghcr.io/x/y:tag", ruleRepositoryName},
		{FieldImage, "localhost:5000/x", ruleRepositoryName},
		{FieldImage, "/etc/passwd", rulePath},
		{FieldImage, "./img", rulePath},
		{FieldImage, "~/img", rulePath},
		{FieldImage, `C:\img`, rulePath},
		{FieldImage, "http://x/y", ruleURL},
		{FieldImage, "a b", rulePrintable},
		{FieldImage, "a\x00b", rulePrintable},
		{FieldImage, "caf\xc3\xa9", rulePrintable},
		{FieldImage, "pi job", rulePrintable},
		{FieldImageDigest, "sha256:" + strings.Repeat("a", 64), ""},
		{FieldImageDigest, "sha256:xyz", ruleSyntax},
		{FieldTZ, "Europe/Amsterdam", ""},
		{FieldTZ, "America/Argentina/Buenos_Aires", ""},
		{FieldTZ, "Etc/GMT+5", ""},
		{FieldTZ, "UTC", ""},
		{FieldTZ, "EST5EDT", ""},
		{FieldTZ, "/usr/share/zoneinfo/UTC", rulePath},
		{FieldTZ, "Europe/../etc", ruleSyntax},
		{FieldTZ, "Europe//Amsterdam", ruleSyntax},
		{FieldVersion, "1.2.3", ""},
		{FieldVersion, "v0.1.0-dev+abc", ""},
		{FieldVersion, "1.0/2", rulePath},
		{FieldFPCron, "0123456789abcdef", ""},
		{FieldFPCron, "0123456789ABCDEF", ruleSyntax},
		{FieldFPCron, "0123", ruleSyntax},
		{FieldCaps, strings.Repeat("s:a,", 300), ""},
		{FieldVersion, strings.Repeat("1", MaxValueLen+1), ruleTooLong},
		{FieldCaps, strings.Repeat("s:a,", MaxCapsLen), ruleTooLong},
		{FieldImage, "", ""},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, refuseRule(tt.field, tt.give), "%s=%q", tt.field, tt.give)
	}
}

// TestRegistry_LivePeersExcludesSelf reads two hosts and sees only the other.
func TestRegistry_LivePeersExcludesSelf(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	logs := &logtest.Buffer{}
	a := newRegistry(t, db.Client, "a", staticFacts(), fastConfig(logs))
	b := newRegistry(t, db.Client, "b", staticFacts(), fastConfig(logs))

	peers, err := a.LivePeers(ctx)
	require.NoError(t, err)
	require.Empty(t, peers)

	require.NoError(t, a.Publish(ctx))
	require.NoError(t, b.Publish(ctx))
	peers, err = a.LivePeers(ctx)
	require.NoError(t, err)
	require.Len(t, peers, 1)
	require.Equal(t, "b", peers[0].Name)
	all, err := b.ReadLive(ctx)
	require.NoError(t, err)
	require.Len(t, all, 2)
}

// TestRegistry_DuplicateName: a second instance on another machine is refused
// with the holder named; closing the refused one leaves the holder's row; after
// the holder leaves the name is free; a restart on the same machine whose
// predecessor's pid is dead takes over, one whose holder is alive is refused.
func TestRegistry_DuplicateName(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	logs := &logtest.Buffer{}

	cfgA := fastConfig(logs)
	cfgA.Machine = "Machine-One"
	cfgA.Pid = 1111
	a := newRegistry(t, db.Client, "mini1", staticFacts(), cfgA)
	require.NoError(t, a.Start(ctx))

	cfgB := fastConfig(logs)
	cfgB.Machine = "machine-two"
	b := newRegistry(t, db.Client, "mini1", staticFacts(), cfgB)
	err := b.Start(ctx)
	require.ErrorIs(t, err, ErrNameInUse)
	var inUse *NameInUseError
	require.ErrorAs(t, err, &inUse)
	require.Equal(t, "machine-one", inUse.Machine)
	require.Equal(t, 1111, inUse.Pid)
	require.Equal(t, a.Instance(), inUse.Instance)
	require.WithinDuration(t, time.Now(), inUse.StartedAt, time.Minute)
	require.Contains(t, err.Error(), `"machine-one"`)
	require.Contains(t, err.Error(), "pid 1111")
	require.Equal(t, a.Instance(), db.Client.HGet(ctx, HostKey("mini1"), FieldInstance).Val(), "the refused instance wrote the row")

	require.NoError(t, b.Close(ctx))
	require.Equal(t, a.Instance(), db.Client.HGet(ctx, HostKey("mini1"), FieldInstance).Val(), "closing the refused instance deleted the holder's row")

	require.NoError(t, a.Close(ctx))
	c := newRegistry(t, db.Client, "mini1", staticFacts(), cfgB)
	require.NoError(t, c.Start(ctx), "the name is free after a clean leave")
	require.NoError(t, c.Close(ctx))

	// A crashed holder on this machine: its pid no longer runs.
	dead := deadPid(t)
	cfgCrashed := fastConfig(logs)
	cfgCrashed.Machine = "machine-one"
	cfgCrashed.Pid = dead
	crashed := newRegistry(t, db.Client, "mini1", staticFacts(), cfgCrashed)
	crashCtx, crash := context.WithCancel(ctx)
	require.NoError(t, crashed.Start(crashCtx))
	crash()
	<-crashed.done

	cfgRestart := fastConfig(logs)
	cfgRestart.Machine = "machine-one"
	restarted := newRegistry(t, db.Client, "mini1", staticFacts(), cfgRestart)
	require.NoError(t, restarted.Start(ctx), "a restart after a crash must take the name over at once")
	require.Equal(t, restarted.Instance(), db.Client.HGet(ctx, HostKey("mini1"), FieldInstance).Val())
	require.Contains(t, db.Client.Get(ctx, ClaimKey("mini1")).Val(), restarted.Instance())
	require.Equal(t, 1, logs.Count(t, "host_name_taken_over"))

	// A live holder on this machine (pid 1 always runs) is never taken over.
	cfgTwin := fastConfig(logs)
	cfgTwin.Machine = "machine-one"
	cfgTwin.Pid = 1
	require.NoError(t, restarted.Close(ctx))
	holder := newRegistry(t, db.Client, "mini1", staticFacts(), cfgTwin)
	require.NoError(t, holder.Start(ctx))
	twin := newRegistry(t, db.Client, "mini1", staticFacts(), cfgRestart)
	require.ErrorIs(t, twin.Start(ctx), ErrNameInUse)
}

// deadPid returns the pid of a process that has exited.
func deadPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	pid := cmd.Process.Pid
	require.True(t, processGone(pid), "pid %d still runs", pid)
	return pid
}

// TestRegistry_ConflictAfterUnreachableStart: Valkey is unreachable at Start,
// so Start succeeds and keeps beating; when Valkey answers and another machine
// holds the name, every beat logs host_name_conflict and nothing is written;
// when the holder goes, the next beat takes the name.
func TestRegistry_ConflictAfterUnreachableStart(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	logs := &logtest.Buffer{}
	limiter := &switchLimiter{}
	limiter.down.Store(true)
	c := clientOf(t, db.Client, func(o *redis.Options) { o.Limiter = limiter })

	r := newRegistry(t, c, "mini1", staticFacts(), fastConfig(logs))
	require.NoError(t, r.Start(ctx), "an unreachable Valkey must not fail Start")
	require.Equal(t, 1, logs.Count(t, "host_registry_unreachable"))

	foreign := `{"instance":"` + strings.Repeat("9", 32) + `","machine":"elsewhere","pid":77,"startedAt":1}`
	require.NoError(t, db.Client.Set(ctx, ClaimKey("mini1"), foreign, time.Minute).Err())
	limiter.down.Store(false)

	require.Eventually(t, func() bool { return logs.Count(t, "host_name_conflict") >= 3 }, 2*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, logs.Count(t, "host_registry_restored"))
	require.Equal(t, foreign, db.Client.Get(ctx, ClaimKey("mini1")).Val(), "the claim was stolen")
	require.Zero(t, db.Client.Exists(ctx, HostKey("mini1")).Val(), "a row was written under a contested name")
	e := logs.Events(t, "host_name_conflict")[0]
	require.Equal(t, "elsewhere", e["holderMachine"])
	require.Equal(t, "mini1", e["host"])

	require.NoError(t, db.Client.Del(ctx, ClaimKey("mini1")).Err())
	require.Eventually(t, func() bool {
		return db.Client.HGet(ctx, HostKey("mini1"), FieldInstance).Val() == r.Instance()
	}, 2*time.Second, 10*time.Millisecond)
}

// TestRegistry_UnreadableClaimRefuses: a claim key that is not a claim (junk,
// or not a string) holds the name; Start says so instead of taking it.
func TestRegistry_UnreadableClaimRefuses(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	logs := &logtest.Buffer{}
	for _, junk := range []func() error{
		func() error { return db.Client.Set(ctx, ClaimKey("mini1"), "\x00junk{", time.Minute).Err() },
		func() error {
			_ = db.Client.Del(ctx, ClaimKey("mini1")).Err()
			return db.Client.HSet(ctx, ClaimKey("mini1"), "a", "b").Err()
		},
	} {
		require.NoError(t, junk())
		r := newRegistry(t, db.Client, "mini1", staticFacts(), fastConfig(logs))
		err := r.Start(ctx)
		require.ErrorIs(t, err, ErrNameInUse)
		require.Contains(t, err.Error(), "unreadable")
	}
}

// TestRegistry_SameHostnameOtherMachine: a holder whose machine name matches
// but whose kernel boot differs is another machine (two hosts both called
// raspberrypi), so its pid cannot be checked here and the name is refused.
func TestRegistry_SameHostnameOtherMachine(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	logs := &logtest.Buffer{}
	cfg := fastConfig(logs)
	cfg.Machine = "raspberrypi"
	r := newRegistry(t, db.Client, "raspberrypi", staticFacts(), cfg)
	require.NotEmpty(t, r.boot, "this test needs %s", bootIDFile)

	foreign := `{"instance":"` + strings.Repeat("7", 32) + `","machine":"raspberrypi","boot":"00000000-0000-0000-0000-000000000000","pid":` +
		strconv.Itoa(deadPid(t)) + `,"startedAt":1}`
	require.NoError(t, db.Client.Set(ctx, ClaimKey("raspberrypi"), foreign, time.Minute).Err())
	require.ErrorIs(t, r.Start(ctx), ErrNameInUse)
	require.Equal(t, foreign, db.Client.Get(ctx, ClaimKey("raspberrypi")).Val())
}

// TestRegistry_NeverTakesBackALostName: two instances that each believe the
// other dead do not trade the name every beat. The first loses it to a
// takeover and then only logs host_name_conflict.
func TestRegistry_NeverTakesBackALostName(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	logs := &logtest.Buffer{}
	cfgA := fastConfig(logs)
	cfgA.Machine, cfgA.Pid = "m1", deadPid(t)
	cfgB := fastConfig(logs)
	cfgB.Machine, cfgB.Pid = "m1", deadPid(t)

	a := newRegistry(t, db.Client, "mini1", staticFacts(), cfgA)
	require.NoError(t, a.Start(ctx))
	b := newRegistry(t, db.Client, "mini1", staticFacts(), cfgB)
	require.NoError(t, b.Start(ctx), "b takes over: a's pid does not run")

	require.Eventually(t, func() bool { return logs.Count(t, "host_name_conflict") >= 3 }, 3*time.Second, 10*time.Millisecond)
	require.Equal(t, b.Instance(), db.Client.HGet(ctx, HostKey("mini1"), FieldInstance).Val())
	require.Contains(t, db.Client.Get(ctx, ClaimKey("mini1")).Val(), b.Instance())
	require.Equal(t, 1, logs.Count(t, "host_name_taken_over"))
}
