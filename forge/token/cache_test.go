package token

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

type countingMinter struct {
	mu    sync.Mutex
	n     int
	ttl   time.Duration
	now   func() time.Time
	fail  error
	repos []string
}

func (m *countingMinter) Mint(_ context.Context, repo string) (Token, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return Token{}, m.fail
	}
	m.n++
	m.repos = append(m.repos, repo)
	return New(fmt.Sprintf("tok-%d", m.n), m.now().Add(m.ttl)), nil
}

func TestCacheRefreshesBeforeExpiry(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	m := &countingMinter{ttl: time.Hour, now: clock}
	c := &Cache{Minter: m, Margin: 5 * time.Minute, Now: clock}
	ctx := context.Background()

	a, err := c.Token(ctx, "acme/api")
	if err != nil || a != "tok-1" {
		t.Fatalf("%q %v", a, err)
	}
	now = now.Add(54 * time.Minute)
	if b, _ := c.Token(ctx, "acme/api"); b != "tok-1" {
		t.Fatalf("a token with 6 minutes left was replaced: %q", b)
	}
	if b, _ := c.Token(ctx, "acme/web"); b != "tok-2" {
		t.Fatalf("another repository shares a token: %q", b)
	}
	now = now.Add(2 * time.Minute) // 4 minutes left: inside the margin
	if b, _ := c.Token(ctx, "acme/api"); b != "tok-3" {
		t.Fatalf("a token about to expire was handed out: %q", b)
	}
	m.fail = errors.New("down")
	now = now.Add(time.Hour)
	if _, err := c.Token(ctx, "acme/api"); err == nil {
		t.Fatal("an expired token was handed out when the mint failed")
	}
}
