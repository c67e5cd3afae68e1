package inbox

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/jobs"
)

func sample() Delivery {
	return Delivery{Forge: jobs.ForgeGitHub, ID: "72d3162e-cc78-11e3", Event: "issue_comment",
		Body: []byte("{\"action\":\"created\",\n\n\"x\":1}"), Received: time.UnixMilli(1765080000123).UTC()}
}

// A stored delivery reads back as it was, and any copy cut short or changed
// does not read at all.
func TestDecodeRefusesEveryChangedCopy(t *testing.T) {
	d := sample()
	enc := d.Encode()
	got, err := Decode(enc, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, d, got)

	for cut := range len(enc) {
		_, err := Decode(enc[:cut], 1<<20)
		require.ErrorIs(t, err, ErrInvalid, "cut at %d of %d", cut, len(enc))
	}
	for i := range enc {
		changed := bytes.Clone(enc)
		changed[i] ^= 0x01
		if _, err := Decode(changed, 1<<20); err == nil {
			// Only a flip that keeps every field valid and the body intact
			// could pass; the header's fields are all checked, so none may.
			t.Fatalf("a flip at byte %d (%q) still decodes", i, enc[i])
		}
	}
	_, err = Decode(enc, int64(len(d.Body)-1))
	assert.ErrorIs(t, err, ErrInvalid, "a body over the limit")
	_, err = Decode(append(bytes.Clone(enc), 'x'), 1<<20)
	assert.ErrorIs(t, err, ErrInvalid, "a longer body")

	bad := d
	bad.ID = "../../etc"
	_, err = Decode(bad.Encode(), 1<<20)
	assert.ErrorIs(t, err, ErrInvalid, "an id outside the alphabet")
	bad = d
	bad.Forge = "bitbucket"
	_, err = Decode(bad.Encode(), 1<<20)
	assert.ErrorIs(t, err, ErrInvalid, "an unknown forge")
}

// The wait before a retry, on an injected clock: the forge's own time when
// it gave one (Retry-After, a rate limit's reset), else a doubling backoff
// with a cap, spread by up to a quarter.
func TestRetryDelay(t *testing.T) {
	now := time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)
	ib := &Inbox{cfg: Config{Now: func() time.Time { return now }}}
	ib.cfg.defaults()

	reset := &forge.LookupError{Status: http.StatusForbidden, RateLimited: true, Reset: now.Add(90 * time.Second)}
	d, said := ib.retryDelay(1, fmt.Errorf("wrapped: %w", reset))
	assert.True(t, said)
	assert.Equal(t, 91*time.Second, d, "until the reset, and a second")

	after := &forge.LookupError{Status: http.StatusTooManyRequests, RateLimited: true, RetryAfter: 30 * time.Second}
	d, said = ib.retryDelay(7, after)
	assert.True(t, said)
	assert.Equal(t, 31*time.Second, d, "Retry-After wins over the try count")

	late := &forge.LookupError{Status: http.StatusTooManyRequests, RateLimited: true, Reset: now.Add(30 * 24 * time.Hour)}
	d, _ = ib.retryDelay(1, late)
	assert.Equal(t, forge.MaxRetryWait+time.Second, d, "a far reset is not believed past MaxRetryWait")

	past := &forge.LookupError{Status: http.StatusForbidden, RateLimited: true, Reset: now.Add(-time.Minute)}
	d, _ = ib.retryDelay(1, past)
	assert.Equal(t, time.Second, d, "a reset already past: a second")

	plain := fmt.Errorf("%w: status 502", forge.ErrLookup)
	for tries, base := range map[int]time.Duration{1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 8: 640 * time.Second, 40: 10 * time.Minute} {
		base = min(base, DefaultMaxBackoff)
		for range 20 {
			d, said := ib.retryDelay(tries, plain)
			assert.False(t, said)
			assert.GreaterOrEqual(t, d, base, "try %d", tries)
			assert.LessOrEqual(t, d, base+base/4, "try %d", tries)
		}
	}
}

func TestRetryReason(t *testing.T) {
	rl := &forge.LookupError{Status: http.StatusForbidden, RateLimited: true}
	assert.Equal(t, "rate-limited", retryReason(rl))
	assert.Equal(t, "lookup-failed", retryReason(&forge.LookupError{Status: 502}))
	assert.Equal(t, "enqueue-failed", retryReason(fmt.Errorf("%w: gh-1: down", forge.ErrEnqueue)))
	assert.Equal(t, "failed", retryReason(errors.New("x")))
}

// The key is what the forge signed and the forge it came from: no header
// the sender may change moves it.
func TestKeyIsTheForgeAndTheBody(t *testing.T) {
	d := Delivery{Forge: jobs.ForgeGitHub, ID: "a", Event: "issues", Body: []byte(`{"x":1}`), Received: time.Unix(1, 0)}
	same := d
	same.ID, same.Event, same.Received = "b", "issue_comment", time.Unix(2, 0)
	if d.Key() != same.Key() {
		t.Fatalf("another id, event or receipt time changed the key: %s, %s", d.Key(), same.Key())
	}
	body := d
	body.Body = []byte(`{"x":2}`)
	other := d
	other.Forge = jobs.ForgeForgejo
	if d.Key() == body.Key() || d.Key() == other.Key() || body.Key() == other.Key() {
		t.Fatalf("another body or forge kept the key: %s %s %s", d.Key(), body.Key(), other.Key())
	}
	if !ValidID(d.Key()) {
		t.Fatalf("the key %q is no valid delivery id", d.Key())
	}
}
