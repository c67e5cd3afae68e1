package queue_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/queue"
)

// A job's fleet signature travels in its opts, is read back by a take and
// by Get, and MoveToSigned replaces it in the same script that moves the
// job; an unsigned job moved the same way stays unsigned.
func TestSignatureInOptsAndResignedOnMove(t *testing.T) {
	t.Parallel()
	db, shared := setup(t, queue.Config{})
	ctx := testCtx(t)
	host, err := queue.New(db.Client, fleet.HostQueueName("gone-1"), queue.Config{})
	require.NoError(t, err)
	oldSig, newSig := strings.Repeat("a", 64), strings.Repeat("b", 64)

	_, _, err = host.Add(ctx, "run", []byte(`{"n":1}`), queue.AddOptions{JobID: "signed-1", Signature: oldSig, Attempts: 2})
	require.NoError(t, err)
	_, _, err = host.Add(ctx, "run", []byte(`{"n":2}`), queue.AddOptions{JobID: "unsigned-1"})
	require.NoError(t, err)
	j, err := host.Get(ctx, "signed-1")
	require.NoError(t, err)
	require.Equal(t, oldSig, j.Signature)
	require.Equal(t, 2, j.Attempts)

	require.NoError(t, host.MoveToSigned(ctx, "signed-1", shared, newSig))
	require.NoError(t, host.MoveToSigned(ctx, "unsigned-1", shared, newSig))
	taken := fetch(t, shared, "t1")
	require.Equal(t, "signed-1", taken.ID)
	require.Equal(t, newSig, taken.Signature)
	require.Equal(t, 2, taken.Attempts, "the other options are kept")
	other, err := shared.Get(ctx, "unsigned-1")
	require.NoError(t, err)
	require.Empty(t, other.Signature)

	_, _, err = shared.Add(ctx, "run", []byte(`{}`), queue.AddOptions{JobID: "bad-sig", Signature: "x\x00y"})
	require.Error(t, err)
}
