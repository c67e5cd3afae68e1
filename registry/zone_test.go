package registry_test

import (
	"testing"

	"github.com/pidispatch/pidispatch/registry"
)

func TestLocalZone(t *testing.T) {
	for tz, want := range map[string]string{":Europe/Paris": "Europe/Paris", "Asia/Tokyo": "Asia/Tokyo"} {
		if got := registry.LocalZone(func(string) string { return tz }); got != want {
			t.Errorf("LocalZone(TZ=%q) = %q, want %q", tz, got, want)
		}
	}
	if got := registry.LocalZone(func(string) string { return "" }); got == "" {
		t.Error("LocalZone without TZ is empty")
	}
}
