package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Bounds of the publish limits.
const (
	PublishMaxFilesDefault = 200
	PublishMaxFilesLimit   = 100_000
	PublishMaxBytesDefault = 5 << 20
	PublishMaxBytesLimit   = 1 << 30
)

// Publish is how the host publishes forge jobs' changes.
type Publish struct {
	// MaxFiles is the most files one job may add, change or remove
	// (PI_PUBLISH_MAX_FILES).
	MaxFiles int
	// MaxBytes is the most bytes of added or changed contents
	// (PI_PUBLISH_MAX_BYTES).
	MaxBytes int64
}

// LoadPublish reads PI_PUBLISH_MAX_FILES and PI_PUBLISH_MAX_BYTES. A bad
// value is a *ConfigError. The credentials publishing uses are
// LoadForgeCredentials's.
func LoadPublish(getenv func(string) string) (Publish, error) {
	p := Publish{MaxFiles: PublishMaxFilesDefault, MaxBytes: PublishMaxBytesDefault}
	if v := strings.TrimSpace(getenv("PI_PUBLISH_MAX_FILES")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > PublishMaxFilesLimit {
			return Publish{}, &ConfigError{Var: "PI_PUBLISH_MAX_FILES", Value: v, Rule: fmt.Sprintf("must be an integer 1..%d", PublishMaxFilesLimit)}
		}
		p.MaxFiles = n
	}
	if v := strings.TrimSpace(getenv("PI_PUBLISH_MAX_BYTES")); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > PublishMaxBytesLimit {
			return Publish{}, &ConfigError{Var: "PI_PUBLISH_MAX_BYTES", Value: v, Rule: fmt.Sprintf("must be an integer 1..%d", int64(PublishMaxBytesLimit))}
		}
		p.MaxBytes = n
	}
	return p, nil
}
