//go:build unix

package dispatch

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/jobs"
)

func TestWorkspaceErr(t *testing.T) {
	t.Parallel()
	refused := &WorkspaceError{Outcome: jobs.OutcomePolicy, Reason: jobs.ReasonCIChange}
	require.Same(t, refused, workspaceErr(refused))
	gone := &WorkspaceError{Outcome: jobs.OutcomeFailed, Reason: jobs.ReasonRepoGone}
	require.Same(t, gone, workspaceErr(errors.Join(errors.New("context"), gone)))
	for _, err := range []error{
		errors.New("plain"),
		&WorkspaceError{Outcome: jobs.OutcomeFailed, Reason: "free text a peer wrote"},
		&WorkspaceError{Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted},
	} {
		we := workspaceErr(err)
		require.Equal(t, jobs.OutcomeFailed, we.Outcome)
		require.Equal(t, jobs.ReasonForgeUnavailable, we.Reason)
		require.True(t, we.Retry)
	}
}
