package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Labels every job container carries. The reaper finds a worker's containers
// by LabelWorker, never by name, so a container someone else named pi-job-x
// is never touched.
const (
	LabelJob    = "dev.pidispatch.job"
	LabelWorker = "dev.pidispatch.worker"
)

// NamePrefix starts every job container's name.
const NamePrefix = "pi-job-"

// maxNameID bounds the sanitized job id inside a name, keeping names short
// enough for every engine and for people reading `docker ps`.
const maxNameID = 100

// ContainerName is the container name for a job: NamePrefix plus the job id
// reduced to [A-Za-z0-9_.-] (other bytes become '-', runs of '-' collapse,
// leading '-' are dropped). When that reduction changed the id, or it had to
// be cut to 100 characters, 16 hex characters of the id's SHA-256 are
// appended, so two ids that reduce alike ("a/b", "a:b") still get different
// names. The name always starts with a letter, as engines require.
func ContainerName(jobID string) string {
	var b strings.Builder
	b.Grow(len(jobID))
	for i := 0; i < len(jobID); i++ {
		c := jobID[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			c = '-'
		}
		if c == '-' && (b.Len() == 0 || strings.HasSuffix(b.String(), "-")) {
			continue
		}
		b.WriteByte(c)
	}
	clean := b.String()
	if clean == jobID && len(clean) <= maxNameID {
		return NamePrefix + clean
	}
	if len(clean) > maxNameID {
		clean = clean[:maxNameID]
	}
	sum := sha256.Sum256([]byte(jobID))
	suffix := hex.EncodeToString(sum[:8])
	if clean == "" || strings.HasSuffix(clean, "-") {
		return NamePrefix + clean + suffix
	}
	return NamePrefix + clean + "-" + suffix
}
