package registry_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/registry"
)

// A worker publishes its row for as long as it runs. Facts are functions, so a
// value that changes at run time is published fresh at every beat.
func ExampleNew() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	concurrency := 3
	reg, err := registry.New(client, "mini1", registry.Facts{
		Image:       registry.Value("pi-job:latest"),
		Concurrency: func() (int, error) { return concurrency, nil },
		Routes:      registry.Value(true),
		Caps:        registry.Value(capabilities.Serialize(capabilities.Tokens([]string{"prod"}, nil))),
		TZ:          registry.Value("Europe/Amsterdam"),
	}, registry.Config{Version: "1.0.0", Logger: slog.Default()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // an invalid name: refuse boot
		return
	}
	if err := reg.Start(ctx); errors.Is(err, registry.ErrNameInUse) {
		fmt.Fprintln(os.Stderr, err) // another live worker holds the name: refuse boot
		return
	}
	defer reg.Close(ctx)
}

// A front-end reads the fleet once and routes a job that needs a secrets
// profile to a host that has it.
func ExampleReadLive() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	hosts, err := registry.ReadLive(ctx, client, 0)
	if errors.Is(err, registry.ErrUnreachable) {
		hosts = nil // fail open: the shared queue
	}
	target := capabilities.Route(registry.CapabilityHosts(hosts), capabilities.Needs("prod", nil), "gh-123", capabilities.RouteFresh)
	fmt.Println("route to:", target)
}
