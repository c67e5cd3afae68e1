package fleetstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// Bounds of the pull request outcome store.
const (
	// MaxPullRequestURL bounds a pull request's URL: a longer one names no
	// key and is refused.
	MaxPullRequestURL = 512
	// PullRequestOutcomeTTL is how long an outcome is kept after its last
	// change: the records it is joined to are read over weeks, not years.
	PullRequestOutcomeTTL = 90 * 24 * time.Hour
	// maxHumanCommits is jobs.PullRequestOutcome's own bound.
	maxHumanCommits = 1 << 20
	// recordTries bounds the optimistic retries of one Record when other
	// writers change the same outcome at once.
	recordTries = 16
)

// ErrPullRequestURL marks a URL the store refuses to key: empty, longer than
// MaxPullRequestURL, not http(s), or holding a space or control character.
var ErrPullRequestURL = errors.New("pull request URL refused")

// ErrRecordContended marks a Record that lost to other writers of the same
// outcome recordTries times in a row; recording it again converges.
var ErrRecordContended = errors.New("pull request outcome contended")

// Fields of an outcome's hash: the encoded outcome and its signature.
const (
	pullOutcomeField = "o"
	pullSigField     = "s"
)

// storedOutcome is an outcome as it is kept: with the URL it belongs to, so
// a value copied under another URL's key does not read there.
type storedOutcome struct {
	URL string `json:"url"`
	jobs.PullRequestOutcome
}

// PullRequests keeps what became of the project's pull requests after their
// runs, by pull request URL: the receiver records each change the forge
// reports, and the readers of run records join it to the records whose
// pullRequestUrl it is.
//
// Anyone who can write to Valkey can write an outcome, and "merged" is what
// the work is judged by. Every value read is validated, and one that does not
// validate is dropped, never trusted; with the fleet key (PullRequestsConfig.Key)
// the writer signs each outcome over its key and the reader drops any outcome
// the key did not sign.
type PullRequests struct {
	rc      redis.UniversalClient
	key     fleet.Key
	ttl     time.Duration
	log     *slog.Logger
	dropped atomic.Int64
}

// PullRequestsConfig configures PullRequests beyond its client.
type PullRequestsConfig struct {
	// Key is the fleet's signing key (PI_FLEET_KEY_FILE). Set, every outcome
	// written is signed and every outcome read must be; the zero Key signs
	// and checks nothing.
	Key fleet.Key
	// Logger receives pull_request_outcome_dropped for each value a read
	// drops. Default: discarded.
	Logger *slog.Logger
}

// NewPullRequests returns the store on client, unsigned: for a fleet
// without a key.
func NewPullRequests(client redis.UniversalClient) *PullRequests {
	return NewPullRequestsWith(client, PullRequestsConfig{})
}

// NewPullRequestsWith returns the store on client, signed and checked with
// cfg.Key when it is set.
func NewPullRequestsWith(client redis.UniversalClient, cfg PullRequestsConfig) *PullRequests {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &PullRequests{rc: client, key: cfg.Key, ttl: PullRequestOutcomeTTL, log: log}
}

// Dropped is how many values this store's reads dropped: not validating,
// naming another URL, or (with the key) not signed by it.
func (p *PullRequests) Dropped() int64 { return p.dropped.Load() }

// CheckPullRequestURL says whether url may key an outcome.
func CheckPullRequestURL(url string) error {
	switch {
	case url == "":
		return fmt.Errorf("%w: empty", ErrPullRequestURL)
	case len(url) > MaxPullRequestURL:
		return fmt.Errorf("%w: longer than %d bytes", ErrPullRequestURL, MaxPullRequestURL)
	case !strings.HasPrefix(url, "https://") && !strings.HasPrefix(url, "http://"):
		return fmt.Errorf("%w: not an http(s) URL", ErrPullRequestURL)
	case strings.ContainsFunc(url, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return fmt.Errorf("%w: it holds a space or control character", ErrPullRequestURL)
	}
	return nil
}

// MergePullRequestOutcome folds an observation of a pull request into what
// was known of it (nil: nothing), the same whatever order the forge's
// deliveries arrive in: merged is final; otherwise the state of the later
// observation (by UpdatedAt) wins; HumanCommits adds up (an observation
// carries the commits it saw pushed); UpdatedAt is the latest.
func MergePullRequestOutcome(known *jobs.PullRequestOutcome, obs jobs.PullRequestOutcome) jobs.PullRequestOutcome {
	if known == nil {
		obs.HumanCommits = min(obs.HumanCommits, maxHumanCommits)
		return obs
	}
	out := *known
	switch {
	case known.State == jobs.PullRequestMerged:
	case obs.State == jobs.PullRequestMerged, !obs.UpdatedAt.Before(known.UpdatedAt):
		out.State = obs.State
	}
	out.HumanCommits = min(known.HumanCommits+obs.HumanCommits, maxHumanCommits)
	if obs.UpdatedAt.After(out.UpdatedAt) {
		out.UpdatedAt = obs.UpdatedAt
	}
	return out
}

// Record folds the observation o of the pull request at url into its stored
// outcome (MergePullRequestOutcome), atomically against other writers, and
// keeps it PullRequestOutcomeTTL from now. An outcome already stored that
// does not read is replaced by o.
func (p *PullRequests) Record(ctx context.Context, url string, o jobs.PullRequestOutcome) error {
	if err := CheckPullRequestURL(url); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return fmt.Errorf("pull request outcome: %w", err)
	}
	key := PullRequestOutcomeKey(url)
	for range recordTries {
		err := p.rc.Watch(ctx, func(tx *redis.Tx) error {
			vals, err := tx.HGetAll(ctx, key).Result()
			if err != nil {
				return err
			}
			var known *jobs.PullRequestOutcome
			if len(vals) > 0 {
				if k, ok := p.decode(key, url, vals); ok {
					known = &k
				}
			}
			next := MergePullRequestOutcome(known, o)
			b, err := json.Marshal(storedOutcome{URL: url, PullRequestOutcome: next})
			if err != nil {
				return err
			}
			fields := []any{pullOutcomeField, string(b)}
			if p.key.IsSet() {
				sig, err := p.key.SignEntry(key, map[string]string{pullOutcomeField: string(b)})
				if err != nil {
					return fmt.Errorf("sign pull request outcome: %w", err)
				}
				fields = append(fields, pullSigField, sig)
			}
			_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				pipe.Del(ctx, key)
				pipe.HSet(ctx, key, fields...)
				pipe.Expire(ctx, key, p.ttl)
				return nil
			})
			return err
		}, key)
		if !errors.Is(err, redis.TxFailedErr) {
			return err
		}
	}
	return fmt.Errorf("%w: %s", ErrRecordContended, url)
}

// Outcomes returns the outcome of each pull request URL the store knows;
// unknown URLs, URLs it refuses to key and values that do not read are
// absent. One round trip for all of them.
func (p *PullRequests) Outcomes(ctx context.Context, urls []string) (map[string]jobs.PullRequestOutcome, error) {
	out := make(map[string]jobs.PullRequestOutcome)
	seen := make(map[string]bool, len(urls))
	pipe := p.rc.Pipeline()
	type ask struct {
		url, key string
		cmd      *redis.MapStringStringCmd
	}
	var asks []ask
	for _, u := range urls {
		if seen[u] || CheckPullRequestURL(u) != nil {
			continue
		}
		seen[u] = true
		key := PullRequestOutcomeKey(u)
		asks = append(asks, ask{u, key, pipe.HGetAll(ctx, key)})
	}
	if len(asks) == 0 {
		return out, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("pull request outcomes: %w", err)
	}
	for _, a := range asks {
		vals, err := a.cmd.Result()
		if err != nil || len(vals) == 0 {
			continue
		}
		if o, ok := p.decode(a.key, a.url, vals); ok {
			out[a.url] = o
		}
	}
	return out, nil
}

// decode reads one stored outcome, checking its signature (with the key),
// the URL it names and its values; a value that fails is dropped and logged.
func (p *PullRequests) decode(key, url string, vals map[string]string) (jobs.PullRequestOutcome, bool) {
	drop := func(why string) (jobs.PullRequestOutcome, bool) {
		p.dropped.Add(1)
		p.log.Warn("pull_request_outcome_dropped", "key", key, "why", why)
		return jobs.PullRequestOutcome{}, false
	}
	raw, ok := vals[pullOutcomeField]
	if !ok {
		return drop("no outcome field")
	}
	if p.key.IsSet() && !p.key.VerifyEntry(key, map[string]string{pullOutcomeField: raw}, vals[pullSigField]) {
		return drop("not signed by the fleet key")
	}
	var s storedOutcome
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return drop("does not parse")
	}
	if s.URL != url {
		return drop("names another pull request")
	}
	if err := s.Validate(); err != nil {
		return drop(err.Error())
	}
	return s.PullRequestOutcome, true
}

// MemoryPullRequests is an in-memory PullRequests for tests: the same
// contract (merge, bounds, unknown URLs absent) without Valkey, signing or
// expiry.
type MemoryPullRequests struct {
	mu  sync.Mutex
	out map[string]jobs.PullRequestOutcome
}

// NewMemoryPullRequests returns an empty in-memory store.
func NewMemoryPullRequests() *MemoryPullRequests {
	return &MemoryPullRequests{out: map[string]jobs.PullRequestOutcome{}}
}

// Record folds o into url's outcome, as PullRequests.Record does.
func (m *MemoryPullRequests) Record(_ context.Context, url string, o jobs.PullRequestOutcome) error {
	if err := CheckPullRequestURL(url); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return fmt.Errorf("pull request outcome: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var known *jobs.PullRequestOutcome
	if k, ok := m.out[url]; ok {
		known = &k
	}
	m.out[url] = MergePullRequestOutcome(known, o)
	return nil
}

// Outcomes returns the known outcomes of urls, as PullRequests.Outcomes does.
func (m *MemoryPullRequests) Outcomes(_ context.Context, urls []string) (map[string]jobs.PullRequestOutcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]jobs.PullRequestOutcome)
	for _, u := range urls {
		if o, ok := m.out[u]; ok {
			out[u] = o
		}
	}
	return out, nil
}
