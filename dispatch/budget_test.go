package dispatch_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/jobs"
)

func TestReservationReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		r    dispatch.Reservation
		want jobs.Reason
	}{
		{dispatch.Reservation{Granted: true, Window: dispatch.WindowDay}, ""},
		{dispatch.Reservation{Window: dispatch.WindowDay}, jobs.ReasonOverBudget},
		{dispatch.Reservation{Window: dispatch.WindowWeek}, jobs.ReasonOverBudget},
		{dispatch.Reservation{Window: dispatch.WindowMonth}, jobs.ReasonOverBudget},
		{dispatch.Reservation{Window: dispatch.WindowScopeDay}, jobs.ReasonScopeCap},
		{dispatch.Reservation{Window: dispatch.WindowScopeWeek}, jobs.ReasonScopeCap},
		{dispatch.Reservation{Window: dispatch.WindowScopeMonth}, jobs.ReasonScopeCap},
		{dispatch.Reservation{Window: dispatch.WindowMonth, Soft: true}, jobs.ReasonSoftHold},
		{dispatch.Reservation{Window: dispatch.WindowScopeDay, Soft: true}, jobs.ReasonSoftHold},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tt.r.Reason(), "%+v", tt.r)
	}
}
