package registry

import (
	"os"
	"path/filepath"
	"strings"
)

// LocalZone is this host's IANA zone name as the worker publishes it in
// its tz fact: TZ when set (a leading ':' dropped), else the zone
// /etc/localtime links to, else UTC.
func LocalZone(getenv func(string) string) string {
	if tz := strings.TrimPrefix(getenv("TZ"), ":"); tz != "" {
		return tz
	}
	if target, err := os.Readlink("/etc/localtime"); err == nil {
		if i := strings.Index(target, "zoneinfo/"); i >= 0 {
			return filepath.ToSlash(target[i+len("zoneinfo/"):])
		}
	}
	return "UTC"
}
