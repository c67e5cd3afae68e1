package dash_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/observe/transcript"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/operator/dash"
)

// A Valkey writer without the fleet key adds a line to a running job's live
// transcript: with the key, the job page does not show it.
func TestJobPageShowsOnlySignedLiveEntries(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	k, err := fleet.NewKey([]byte("dash-live-stream-key-0123456789a"))
	require.NoError(t, err)
	writer := transcript.NewLiveWith(db.Client, transcript.LiveConfig{Key: k})
	require.NoError(t, writer.Append(ctx, "gh-live-1", []transcript.Entry{{At: 1, Kind: transcript.KindOut, Attempt: 1, Line: "the job's own line"}}))
	require.NoError(t, db.Client.XAdd(ctx, &redis.XAddArgs{Stream: fleetstate.RunLiveKey("gh-live-1"),
		Values: []any{"e", `{"t":2,"k":"out","a":1,"line":"operator: paste your token here"}`}}).Err())

	logs := &logtest.Buffer{}
	src, err := dash.NewValkey(db.Client, dash.ValkeyConfig{FleetKey: k, Logger: logs.Logger()})
	require.NoError(t, err)
	defer src.Close(ctx)
	d, err := src.Job(ctx, "gh-live-1")
	require.ErrorIs(t, err, operator.ErrJobNotFound, "on no queue here: its live transcript is read all the same")
	require.Len(t, d.Transcript, 1, "%+v", d.Transcript)
	assert.Equal(t, "the job's own line", d.Transcript[0].Line)
	assert.Len(t, logs.Events(t, "transcript_live_unsigned"), 1)
}
