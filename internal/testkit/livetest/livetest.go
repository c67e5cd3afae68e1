// Package livetest gives tests live services: a Valkey database of their own and a
// Docker client that has answered a ping.
//
// Without the service a test skips, so `go test ./...` works on a laptop with
// nothing running; with PIDISPATCH_REQUIRE_LIVE=1 (set by .ci/run) a missing
// service fails the test instead, so CI can never pass by skipping. Under
// `go test -short` every test that needs a live service skips, whatever
// PIDISPATCH_REQUIRE_LIVE says: the short lane runs the fake-backed tests
// alone.
package livetest

import (
	"os"
	"testing"
)

// Environment variables read by the helpers.
const (
	// EnvValkey is the URL of a disposable Valkey (or redis-server) for tests.
	// Tests take whole logical databases of it and flush them.
	EnvValkey = "VALKEY_TEST_URL"
	// EnvRequire turns a missing service from a skip into a failure.
	EnvRequire = "PIDISPATCH_REQUIRE_LIVE"
)

// Required reports whether missing live services must fail tests.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// SkipShort skips a test that needs a live service (or is slow) under
// `go test -short`.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: needs a live service")
	}
}

// unavailable skips the test, or fails it when live services are required.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf("live service required ("+EnvRequire+"=1): "+format, args...)
	}
	t.Skipf("live service unavailable: "+format, args...)
}
