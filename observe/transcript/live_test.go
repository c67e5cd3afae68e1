package transcript_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
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
