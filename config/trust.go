package config

import (
	"errors"
	"strconv"
	"strings"

	"github.com/pidispatch/pidispatch/fleet"
)

// Bounds of PI_JOB_OUTPUT_MAX.
const (
	DefaultJobOutputMax = int64(16) << 20 // 16 MiB
	MinJobOutputMax     = int64(64) << 10 // the exit line's scan window, with room
	MaxJobOutputMax     = int64(1) << 30
)

// readTrust reads the fleet key and output variables.
func (r *envReader) readTrust(c *Config) {
	r.envText("PI_FLEET_KEY_FILE", &c.FleetKeyFile)
	if v, ok := r.lookupEnv("PI_UNSIGNED_QUEUES"); ok {
		c.UnsignedQueues = SplitQueues(v)
	}
	parseEnv(r, "PI_JOB_OUTPUT_MAX", parseMemory, &c.JobOutputMax)
}

// SplitQueues reads a PI_UNSIGNED_QUEUES value: queue names (or *),
// comma-separated, blanks ignored. It does not validate them (Validate does).
func SplitQueues(v string) []string {
	var out []string
	for _, q := range strings.Split(v, ",") {
		if q = strings.TrimSpace(q); q != "" {
			out = append(out, q)
		}
	}
	return out
}

// trustProblems checks the fleet key file (readable, at least 32 bytes, not
// world-readable), the unsigned-queue allowance and the output cap. A host
// without a key is valid: it refuses every job the key did not sign, unless
// PI_UNSIGNED_QUEUES opts its queues in.
func (c Config) trustProblems(p *problemList) {
	if c.FleetKeyFile != "" {
		if rule := filePathRule(c.FleetKeyFile); rule != "" {
			p.add("PI_FLEET_KEY_FILE", c.FleetKeyFile, rule)
		} else if _, err := fleet.LoadKey(c.FleetKeyFile); err != nil {
			p.add("PI_FLEET_KEY_FILE", c.FleetKeyFile, fleetKeyRule(err))
		}
	}
	for _, q := range c.UnsignedQueues {
		if q != fleet.EveryQueue && !validQueueName(q) {
			p.add("PI_UNSIGNED_QUEUES", strings.Join(c.UnsignedQueues, ","), "must list queue names (pi-jobs or pi-jobs@<worker name>) or *, comma-separated")
			break
		}
	}
	if c.JobOutputMax < MinJobOutputMax || c.JobOutputMax > MaxJobOutputMax {
		p.add("PI_JOB_OUTPUT_MAX", strconv.FormatInt(c.JobOutputMax, 10), "must be between 64k and 1g")
	}
}

// fleetKeyRule words a refused key file as the rule it breaks.
func fleetKeyRule(err error) string {
	switch {
	case errors.Is(err, fleet.ErrKeyTooShort):
		return "the key must be at least 32 bytes (for example: head -c 48 /dev/urandom | base64 > FILE; chmod 600 FILE)"
	case errors.Is(err, fleet.ErrKeyWorldReadable):
		return "the file must not be readable by every user (chmod 600 FILE, or 640 for a group)"
	}
	return "must name a key file this user can read (" + err.Error() + ")"
}

// validQueueName accepts the shared queue and a host queue of a valid name.
func validQueueName(q string) bool {
	if q == fleet.SharedQueue {
		return true
	}
	name, ok := strings.CutPrefix(q, fleet.HostQueuePrefix)
	return ok && fleet.ValidateName(name) == nil
}

// loadFleetKey fills FleetKey from FleetKeyFile, once the configuration
// passed its checks (which read the file the same way).
func (c *Config) loadFleetKey() error {
	if c.FleetKeyFile == "" || c.FleetKey.IsSet() {
		return nil
	}
	k, err := fleet.LoadKey(c.FleetKeyFile)
	if err != nil {
		return ConfigErrors{newConfigError("PI_FLEET_KEY_FILE", c.FleetKeyFile, fleetKeyRule(err))}
	}
	c.FleetKey = k
	return nil
}
