package queue_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/queue"
)

func TestBackoff_DelayForFollowsBullMQ(t *testing.T) {
	t.Parallel()
	exp := queue.Backoff{Type: queue.BackoffExponential, Delay: time.Minute}
	fixed := queue.Backoff{Type: queue.BackoffFixed, Delay: 5 * time.Second}
	tests := []struct {
		b    queue.Backoff
		made int
		want time.Duration
	}{
		{exp, 1, time.Minute}, {exp, 2, 2 * time.Minute}, {exp, 3, 4 * time.Minute},
		{fixed, 1, 5 * time.Second}, {fixed, 4, 5 * time.Second},
		{queue.Backoff{}, 3, 0},
		{queue.Backoff{Type: queue.BackoffExponential, Delay: 3 * time.Millisecond}, 2, 6 * time.Millisecond},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tt.b.DelayFor(tt.made), "%+v after %d", tt.b, tt.made)
	}
}

func TestValidateQueueName(t *testing.T) {
	t.Parallel()
	good := []string{"pi-jobs", "pi-jobs@w", "pi-jobs@Mini-1.local", "pi-jobs@" + string(make64('a'))}
	bad := []string{"", "pi-jobs@", "pi-jobs@-x", "pi-jobs@.x", "pi-jobs@a b", "pi-jobs@a:b",
		"pi-jobs@a@b", "pi-jobs@x.json", "pi-jobs@X.LOG", "pi-jobs@" + string(make64('a')) + "a",
		"pi-jobs2", "PI-JOBS", "pi-jobs@\x00", "pi-jobs@é"}
	for _, n := range good {
		require.NoError(t, queue.ValidateQueueName(n), n)
	}
	for _, n := range bad {
		require.ErrorIs(t, queue.ValidateQueueName(n), queue.ErrInvalidQueueName, n)
	}
	require.Equal(t, "pi-jobs@mini", fleet.HostQueueName("mini"))
}

func make64(c byte) []byte {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return b
}

func TestValidateJobID_BullMQRules(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"gh-abc", "local-0123abcd", "007", "repeat:s:1700000000000", "a#1", "-0"} {
		require.NoError(t, queue.ValidateJobID(id), id)
	}
	for _, id := range []string{"", "42", "-1", "a:b", "a:b:c:d", "x\ny", "bad\xff"} {
		err := queue.ValidateJobID(id)
		var oe *queue.OptionError
		require.True(t, errors.As(err, &oe), id)
		require.Equal(t, "JobID", oe.Field, id)
	}
}

func TestNextRun(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 3, 28, 23, 59, 30, 0, time.UTC)
	got, err := queue.NextRun("0 9 * * *", "Europe/Amsterdam", base)
	require.NoError(t, err)
	// 29 March 2026 is the DST switch in Amsterdam: 09:00 CEST = 07:00 UTC.
	require.Equal(t, time.Date(2026, 3, 29, 7, 0, 0, 0, time.UTC), got.UTC())
	got, err = queue.NextRun("*/10 * * * * *", "", base)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 3, 28, 23, 59, 40, 0, time.UTC), got.UTC(), "6 fields: seconds first")
	got, err = queue.NextRun("@daily", "", base)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC), got.UTC())
	_, err = queue.NextRun("61 * * * *", "", base)
	require.ErrorIs(t, err, queue.ErrInvalidOption)
	_, err = queue.NextRun("0 0 L * *", "", base)
	require.ErrorIs(t, err, queue.ErrInvalidOption, "L is read differently by gronx and cron-parser")
}

// On the days clocks change, runs follow BullMQ's cron-parser (the interop
// test compares a year of changes in several zones with it): a time in the
// spring-forward gap runs after the gap, and a repeated hour runs once.
func TestNextRun_DSTDaysAsCronParser(t *testing.T) {
	t.Parallel()
	ams, err := time.LoadLocation("Europe/Amsterdam")
	require.NoError(t, err)
	for _, tc := range []struct{ pattern, after, want string }{
		{"30 2 * * *", "2026-03-29T00:00:00+01:00", "2026-03-29T01:30:00Z"},
		{"0 */2 * * *", "2026-10-25T01:30:00+02:00", "2026-10-25T00:00:00Z"},
		{"0 */2 * * *", "2026-10-25T02:00:00+02:00", "2026-10-25T03:00:00Z"},
	} {
		after, err := time.Parse(time.RFC3339, tc.after)
		require.NoError(t, err)
		got, err := queue.NextRun(tc.pattern, ams.String(), after)
		require.NoError(t, err)
		require.Equal(t, tc.want, got.UTC().Format(time.RFC3339), "%s after %s", tc.pattern, tc.after)
	}
}

// ValidateJobID is fleet.CheckJobID plus BullMQ's own rules, and its
// refusals are option errors.
func TestValidateJobID(t *testing.T) {
	if err := queue.ValidateJobID("a\nb"); !errors.Is(err, queue.ErrInvalidOption) {
		t.Errorf("ValidateJobID(a\\nb) = %v, want an option error", err)
	}
	if queue.ValidateJobID("123") == nil || queue.ValidateJobID("a:b") == nil {
		t.Error("ValidateJobID takes ids BullMQ refuses")
	}
}
