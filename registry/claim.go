package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// ErrNameInUse is the condition of a worker name held by another live instance.
// Start returns it wrapped in a *NameInUseError.
var ErrNameInUse = errors.New("worker name is in use by another live worker")

// NameInUseError names the instance that holds a contested worker name. The
// worker refuses to boot with its message: two processes under one name would
// overwrite each other's row, drain each other's host queue and sweep each
// other's scope claims.
type NameInUseError struct {
	Name      string    // the contested worker name
	Machine   string    // the holder's machine (sanitized hostname); "" when its claim is unreadable
	Pid       int       // the holder's process id
	StartedAt time.Time // when the holder started (its own clock); zero when unknown
	Instance  string    // the holder's instance id
}

func (e *NameInUseError) Error() string {
	if e.Machine == "" && e.Instance == "" {
		return fmt.Sprintf("worker name %q is in use: its claim %s is unreadable; delete that key if no worker holds the name",
			e.Name, ClaimKey(e.Name))
	}
	since := "at an unknown time"
	if !e.StartedAt.IsZero() {
		since = "since " + e.StartedAt.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("worker name %q is in use by pid %d on machine %q (started %s); stop that worker or set another PI_WORKER_NAME (a crashed holder frees the name when its claim expires)",
		e.Name, e.Pid, e.Machine, since)
}

// Is makes errors.Is(err, ErrNameInUse) true.
func (e *NameInUseError) Is(target error) bool { return target == ErrNameInUse }

// claim is the value of host:id:<name>. Field order is fixed by the struct, so
// one instance always renders the same bytes and the scripts compare values
// byte for byte.
type claim struct {
	Instance  string `json:"instance"`
	Machine   string `json:"machine"`
	Boot      string `json:"boot,omitempty"` // the kernel's boot id: two machines that share a hostname differ here
	Pid       int    `json:"pid"`
	StartedAt int64  `json:"startedAt"` // ms, the holder's own clock: shown to an operator, never compared
}

// bootIDFile is where Linux publishes a random id per kernel boot. Containers
// see their host's, so it tells machines apart (two hosts both called
// raspberrypi, which also share the default worker name) but not containers on
// one machine.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

// bootID reads this kernel's boot id, "" where there is none.
func bootID() string {
	b, err := os.ReadFile(bootIDFile)
	if err != nil {
		return ""
	}
	id := strings.TrimSpace(string(b))
	if len(id) > 64 || !allBytes(id, func(c byte) bool { return isLowerHex(c) || c == '-' }) {
		return ""
	}
	return id
}

// maxClaimLen bounds a claim value we try to decode; ours is about 130 bytes.
const maxClaimLen = 1024

// parseClaim decodes a holder's claim. A value that is not a claim reports
// ok false: the name is held by something we cannot identify.
func parseClaim(raw string) (c claim, ok bool) {
	if raw == "" || len(raw) > maxClaimLen {
		return c, false
	}
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return claim{}, false
	}
	if c.Instance == "" || c.Machine == "" {
		return claim{}, false
	}
	return c, true
}

// inUseError describes the holder of name.
func inUseError(name string, holder claim, ok bool) *NameInUseError {
	if !ok {
		return &NameInUseError{Name: name}
	}
	e := &NameInUseError{Name: name, Machine: holder.Machine, Pid: holder.Pid, Instance: holder.Instance}
	if holder.StartedAt > 0 {
		e.StartedAt = time.UnixMilli(holder.StartedAt)
	}
	return e
}
