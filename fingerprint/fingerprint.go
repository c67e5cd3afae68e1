// Package fingerprint computes canonical fingerprints of configuration, so that hosts of a
// fleet can find out whether they agree without publishing what they agree on.
//
// A fingerprint travels through the host registry, which refuses paths, and a cron schedule
// set legitimately holds run folders, tasks and secret names: the registry carries proof of
// agreement rather than the thing agreed on. The digests are byte-identical to the original
// Node implementation's (fingerprint.mjs), so Node and Go workers in one fleet compare equal
// exactly when their inputs are equal. Object keys are sorted recursively because key order
// is an accident of whoever built the value; a real change of content still changes the hash.
//
// The package is pure (standard library only): a fingerprint needs no queue, no Valkey and no
// filesystem.
package fingerprint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Of returns the first 16 hex digits of sha256(Canonical(v)). Sixteen, as in the original,
// because the digest is compared and displayed, never used as a security boundary.
func Of(v any) (string, error) {
	text, err := Canonical(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(text)
	return hex.EncodeToString(sum[:8]), nil
}

// CronEntry is one authored cron entry of a triggers file: every field that reconcile
// consumes, so that a host changing any of them (run.folder, run.flow, run.image, ...) no
// longer agrees with one that did not.
type CronEntry struct {
	SchedulerID string
	Pattern     string
	// Run is the entry's run object as JSON text. Nil or empty hashes as JSON null, as an
	// absent run does in the original.
	Run json.RawMessage
}

// Cron fingerprints a worker's authored cron set with its time zone: the value
// {"tz": tz, "schedules": [{"schedulerId", "pattern", "run"}, ...]}, entries in the given
// order. The zone rides the hash because a cron pattern carries none; the same pattern in two
// zones is two different instants, and including tz makes that a disagreement peers can see.
//
// An empty list is an opinion ("there should be no schedulers") and hashes as []. A nil slice
// hashes as [] too: abstaining (cron disabled on this host, which the original signals with a
// null fingerprint) is the caller's to say, by publishing an empty fingerprint instead of
// calling Cron.
//
// A Run that is not valid JSON is an error (wrapping ErrInvalidJSON) naming the entry's
// scheduler id.
func Cron(entries []CronEntry, tz string) (string, error) {
	schedules := make([]any, 0, len(entries))
	for _, e := range entries {
		var run any // JSON null
		if len(e.Run) > 0 {
			v, err := decode(e.Run)
			if err != nil {
				return "", fmt.Errorf("cron entry %q: run: %w", e.SchedulerID, err)
			}
			run = v
		}
		schedules = append(schedules, map[string]any{
			"schedulerId": e.SchedulerID,
			"pattern":     e.Pattern,
			"run":         run,
		})
	}
	return Of(map[string]any{"tz": tz, "schedules": schedules})
}
