package dispatch

import (
	"context"
	"time"
)

// SecretResolver runs a secrets profile's resolver (the executable
// PI_SECRET_PROFILES names for it) within timeout, and returns the KEY=VALUE
// pairs it printed. Its errors never carry a value.
// secretprofile.Resolver implements it.
type SecretResolver interface {
	Resolve(ctx context.Context, path, profile string, timeout time.Duration) (map[string]string, error)
}
