package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"time"

	"github.com/pidispatch/pidispatch/internal/sinktext"
)

// hookPath is the only environment the hook gets: no secret of the worker's.
const hookPath = "PATH=/usr/local/bin:/usr/bin:/bin"

// runHook runs the failure hook once. A hook that cannot be started is not
// retried; one that exits non-zero or outlives its timeout is.
func (n *Notifier) runHook(ctx context.Context, ev Event) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.HookTimeout)
	defer cancel()
	// Each value is written by sinktext.Arg: an id starting with - (a
	// Valkey writer's --output=/tmp/x) must not reach the hook's option
	// parser as an option.
	cmd := exec.CommandContext(ctx, n.cfg.Hook, sinktext.Arg(ev.JobID), sinktext.Arg(ev.Outcome), sinktext.Arg(ev.Reason), sinktext.Arg(ev.Host))
	cmd.Env = []string{hookPath}
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("start hook: %w", err)
	}
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return true, fmt.Errorf("hook ran past %s", n.cfg.HookTimeout)
		}
		return true, fmt.Errorf("hook: %w", err)
	}
	return false, nil
}

// post sends ev to the webhook once. A 2xx delivered it; 408, 425, 429 and
// 5xx (and no answer) are retried; any other status is not.
func (n *Notifier) post(ctx context.Context, ev Event) (retry bool, err error) {
	body, err := json.Marshal(ev)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.PostTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("webhook request: invalid URL")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", ev.ID)
	resp, err := n.cfg.Client.Do(req)
	if err != nil {
		// The error names the URL, which may hold a token: say only what failed.
		return true, fmt.Errorf("webhook unreachable (%s)", errKind(err, ctx))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		return false, nil
	case s == 408 || s == 425 || s == 429 || s >= 500:
		return true, fmt.Errorf("webhook answered %d", s)
	default:
		return false, fmt.Errorf("webhook answered %d", s)
	}
}

func errKind(err error, ctx context.Context) string {
	var t interface{ Timeout() bool }
	if ctx.Err() != nil || errors.As(err, &t) && t.Timeout() {
		return "timed out"
	}
	return "connection failed"
}
