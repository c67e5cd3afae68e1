package token

import (
	"context"
	"sync"
	"time"
)

// DefaultRefreshMargin is how long before its expiry a cached token is
// minted again.
const DefaultRefreshMargin = 5 * time.Minute

// Cache hands out a Minter's tokens per repository and mints again one that
// expires within Margin, so a long-running reader (the receiver's permission
// lookups, the poller) never calls with an expired token. Its Token method
// is forge.Tokens. It is safe for concurrent use.
type Cache struct {
	Minter Minter
	// Margin is how early a token is replaced; 0: DefaultRefreshMargin.
	Margin time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time

	mu     sync.Mutex
	tokens map[string]Token
}

// Token returns a token for repo valid for at least Margin.
func (c *Cache) Token(ctx context.Context, repo string) (string, error) {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	margin := c.Margin
	if margin <= 0 {
		margin = DefaultRefreshMargin
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.tokens[repo]; ok && t.Valid(now(), margin) {
		return t.Reveal(), nil
	}
	t, err := c.Minter.Mint(ctx, repo)
	if err != nil {
		return "", err
	}
	if c.tokens == nil {
		c.tokens = map[string]Token{}
	}
	c.tokens[repo] = t
	return t.Reveal(), nil
}
