package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
)

// ReadHolders names the holder of each taken slot, whoever took it, leaves
// free slots out and never trusts a value's worker name.
func TestReadHoldersNamesEachTakenSlot(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	hash := fleet.ScopeHash("acme/web")
	key := func(i int) string { return fleet.ScopeSlotKey(hash, i) }

	l := New(db.Client, "w1", Config{})
	h, err := l.Acquire(ctx, "job-1", 3, time.Minute, key)
	require.NoError(t, err)
	require.NotEmpty(t, h.Key())
	require.NoError(t, db.Client.Set(ctx, key(2), "bad name!#job-9", time.Minute).Err())

	got, err := ReadHolders(ctx, db.Client, 3, key)
	require.NoError(t, err)
	require.Len(t, got, 2)
	byID := map[string]Holder{}
	for _, g := range got {
		byID[g.ID] = g
	}
	require.Equal(t, "w1", byID["job-1"].Host)
	require.Equal(t, key(byID["job-1"].Slot), h.Key())
	require.Equal(t, Holder{Slot: 2, Host: "", ID: "job-9"}, byID["job-9"])

	none, err := ReadHolders(ctx, db.Client, 0, key)
	require.NoError(t, err)
	require.Empty(t, none)
}
