package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/registry"
)

// With the fleet key, `hosts` marks a row written straight into Valkey by
// a party without the key as untrusted, and the signed host's row not; a
// key file the worker would refuse refuses the command, naming the variable.
func TestHostsMarksUnsignedRowsUntrusted(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	keyFile := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("fleet-key-", 4)), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := fleet.LoadKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(db.Client, "signed-1", registry.Facts{Routes: registry.Value(true)}, registry.Config{FleetKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close(context.Background()) })
	now, err := db.Client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Client.HSet(ctx, registry.HostKey("forged-1"), registry.FieldName, "forged-1", registry.FieldRoutes, "true",
		registry.FieldBeatAt, strconv.FormatInt(now.UnixMilli(), 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := db.Client.SAdd(ctx, registry.LiveKey, "forged-1").Err(); err != nil {
		t.Fatal(err)
	}

	r := runCLI(t, map[string]string{"VALKEY_URL": db.URL, "PI_FLEET_KEY_FILE": keyFile}, "hosts")
	if r.code != exitOK || !strings.Contains(r.stdout, "forged-1 (untrusted)") || strings.Contains(r.stdout, "signed-1 (untrusted)") ||
		!strings.Contains(r.stdout, "untrusted: forged-1:") {
		t.Fatalf("hosts: %+v", r)
	}
	r = runCLI(t, map[string]string{"VALKEY_URL": db.URL, "PI_FLEET_KEY_FILE": keyFile}, "hosts", "--json")
	if r.code != exitOK || strings.Count(r.stdout, `"untrusted":true`) != 1 {
		t.Fatalf("hosts --json: %+v", r)
	}
	if err := os.Chmod(keyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, map[string]string{"VALKEY_URL": db.URL, "PI_FLEET_KEY_FILE": keyFile}, "hosts")
	if r.code != exitUsage || !strings.Contains(r.stderr, "PI_FLEET_KEY_FILE") {
		t.Fatalf("world-readable key: %+v", r)
	}
}
