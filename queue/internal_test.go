package queue

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestIsJSInteger_MatchesBullMQ(t *testing.T) {
	t.Parallel()
	// `${parseInt(id, 10)}` === id, evaluated in node for each value.
	tests := []struct {
		give string
		want bool
	}{
		{"0", true}, {"123", true}, {"-5", true}, {"9007199254740992", true},
		{"12345678901234567000", true}, {"100000000000000000000", true},
		{"-0", false}, {"007", false}, {"1e3", false}, {" 12", false}, {"12 ", false},
		{"+1", false}, {"1.0", false}, {"9007199254740993", false},
		{"12345678901234567890", false}, {"1000000000000000000000", false},
		{"", false}, {"-", false}, {"abc", false}, {"12a", false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, isJSInteger(tt.give), tt.give)
	}
}

func TestKeys_BullMQLayout(t *testing.T) {
	t.Parallel()
	k := newKeys("bull", "pi-jobs@w1")
	require.Equal(t, "bull:pi-jobs@w1:wait", k.wait())
	require.Equal(t, "bull:pi-jobs@w1:marker", k.marker())
	require.Equal(t, "bull:pi-jobs@w1:meta", k.meta())
	require.Equal(t, "bull:pi-jobs@w1:", k.jobPrefix())
	require.Equal(t, "bull:pi-jobs@w1:de:x#1", k.dedup("x#1"))
	require.Equal(t, "bull:pi-jobs@w1:repeat:s", k.scheduler("s"))
	require.Len(t, k.scriptKeys("extra"), kCount+1)
	require.Equal(t, `bull:pi-jobs@*:meta`, hostMetaPattern("bull"))
	require.Equal(t, `a\*b:pi-jobs@*:meta`, hostMetaPattern("a*b"))
	name, ok := queueFromMetaKey("bull", "bull:pi-jobs@w1:meta")
	require.True(t, ok)
	require.Equal(t, "pi-jobs@w1", name)
	_, ok = queueFromMetaKey("bull", "bull:meta")
	require.False(t, ok)
}

func TestKeep_WireAndBack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give Keep
		wire string
	}{
		{Keep{}, `null`},
		{Keep{None: true}, `true`},
		{Keep{Count: 5}, `{"count":5}`},
		{Keep{Age: 36 * time.Hour}, `{"age":129600}`},
		{Keep{Age: 1500 * time.Millisecond, Count: 2}, `{"age":1.5,"count":2}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.give.wire())
		require.NoError(t, err)
		require.JSONEq(t, tt.wire, string(b))
		require.Equal(t, tt.give, parseKeep(b), tt.wire)
	}
	// BullMQ's other spellings.
	require.Equal(t, Keep{None: true}, parseKeep([]byte(`0`)))
	require.Equal(t, Keep{Count: 3}, parseKeep([]byte(`3`)))
	require.Equal(t, Keep{}, parseKeep([]byte(`false`)))
	require.Equal(t, Keep{}, parseKeep([]byte(`"junk"`)))
}

func TestParseJob_JunkFieldsGiveDefinedResult(t *testing.T) {
	t.Parallel()
	j := parseJob("7", []any{
		"name", "x", "data", "{not json", "opts", "[1,2", "atm", "NaN", "timestamp", "-5",
		"processedOn", "1e400", "returnvalue", "\x00", "priority", "3", "odd",
	})
	require.Equal(t, "7", j.ID)
	require.Nil(t, j.Data)
	require.Zero(t, j.AttemptsMade)
	require.True(t, j.Timestamp.IsZero())
	require.True(t, j.ProcessedOn.IsZero())
	require.Equal(t, 3, j.Priority)
	require.Contains(t, j.Corrupt, "data")
	require.Contains(t, j.Corrupt, "opts")
	require.Contains(t, j.Corrupt, "returnvalue")

	ok := parseJob("8", []any{"name", "y", "data", `{"a":1}`, "opts",
		`{"attempts":2,"backoff":{"type":"exponential","delay":60000},"removeOnFail":{"age":604800},"de":{"id":"d"}}`,
		"atm", "1", "timestamp", "1700000000000"})
	require.Empty(t, ok.Corrupt)
	require.Equal(t, 2, ok.Attempts)
	require.Equal(t, Backoff{Type: BackoffExponential, Delay: time.Minute}, ok.Backoff)
	require.Equal(t, Keep{Age: 7 * 24 * time.Hour}, ok.RemoveOnFail)
	require.Equal(t, "d", ok.DedupID)
	require.Equal(t, int64(1700000000000), ok.Timestamp.UnixMilli())
}

func TestAddOptions_WireIsBullMQs(t *testing.T) {
	t.Parallel()
	b, err := AddOptions{
		JobID: "gh-1", Delay: 1500 * time.Millisecond, Attempts: 2,
		Backoff:          Backoff{Type: BackoffExponential, Delay: time.Minute},
		RemoveOnComplete: Keep{Age: 24 * time.Hour}, RemoveOnFail: Keep{None: true},
		Dedup: &Dedup{ID: "r#1", TTL: 10 * time.Minute},
	}.validate()
	require.NoError(t, err)
	require.JSONEq(t, `{"attempts":2,"delay":1500,"jobId":"gh-1",
		"backoff":{"type":"exponential","delay":60000},
		"removeOnComplete":{"age":86400},"removeOnFail":true,
		"de":{"id":"r#1","ttl":600000}}`, string(b))
}
