package fleetsim

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/registry"
)

// Operation names, as the report prints them.
const (
	OpBeat          = "beat"
	OpPickup        = "pickup"
	OpLeaseAcquire  = "lease acquire"
	OpLeaseRelease  = "lease release"
	OpBudgetReserve = "budget reserve"
	OpDollarReserve = "dollar reserve"
	OpDollarSettle  = "dollar settle"
	OpComplete      = "complete"
	OpMirror        = "record mirror"
	OpStalled       = "stalled check"
	OpRehome        = "rehome read"
	OpCronGate      = "cron gate read"
	OpRouteRead     = "routing decision read"
	OpEnqueue       = "route and enqueue"
	OpReceiverPut   = "receiver store"
	OpStatus        = "status"
	OpDashboard     = "dashboard read"
	// opFetch labels the consumer's calls (fetch scripts, BZPOPMIN); it is
	// not timed as an operation of its own: pickup is.
	opFetch = "consumer"
	// opBoot and opInbox label a host's boot and a receiver's inbox loops.
	opBoot  = "boot"
	opInbox = "receiver inbox"
)

// opOrder is the order operations are printed in.
var opOrder = []string{
	OpRouteRead, OpCronGate, OpBeat, OpPickup, OpStatus, OpDashboard,
	OpRehome, OpStalled, OpEnqueue, OpReceiverPut,
	OpLeaseAcquire, OpBudgetReserve, OpDollarReserve, OpDollarSettle, OpComplete, OpMirror, OpLeaseRelease,
}

// recorder collects each operation's client-side durations.
type recorder struct {
	mu      sync.Mutex
	on      bool
	samples map[string][]time.Duration
	errs    map[string]int
}

func newRecorder() *recorder {
	return &recorder{samples: map[string][]time.Duration{}, errs: map[string]int{}}
}

// start discards what was recorded and records from now on.
func (r *recorder) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = true
	r.samples = map[string][]time.Duration{}
	r.errs = map[string]int{}
}

// stop ends recording and returns what was recorded.
func (r *recorder) stop() (map[string][]time.Duration, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	return r.samples, r.errs
}

func (r *recorder) add(op string, d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.on {
		return
	}
	if err != nil {
		r.errs[op]++
		return
	}
	r.samples[op] = append(r.samples[op], d)
}

// time runs f and records its duration under op.
func (r *recorder) time(op string, f func() error) error {
	start := time.Now()
	err := f()
	r.add(op, time.Since(start), err)
	return err
}

// Latency is one operation's client-side figures over the steady window.
type Latency struct {
	Count  int           `json:"count"`
	PerSec float64       `json:"perSec"`
	P50    time.Duration `json:"p50"`
	P99    time.Duration `json:"p99"`
	Max    time.Duration `json:"max"`
	Errors int           `json:"errors,omitempty"`
}

func summarize(s []time.Duration, window time.Duration, errs int) Latency {
	l := Latency{Count: len(s), Errors: errs}
	if window > 0 {
		l.PerSec = float64(len(s)) / window.Seconds()
	}
	if len(s) == 0 {
		return l
	}
	s = slices.Clone(s)
	slices.Sort(s)
	l.P50, l.P99, l.Max = rank(s, 50), rank(s, 99), s[len(s)-1]
	return l
}

// rank is the nearest-rank p-th percentile of sorted, non-empty s.
func rank(s []time.Duration, p int) time.Duration {
	i := (len(s)*p + 99) / 100
	return s[max(i, 1)-1]
}

// opKey carries the operation a Valkey call belongs to, for the hook.
type opKey struct{}

func withOp(ctx context.Context, op string) context.Context {
	return context.WithValue(ctx, opKey{}, op)
}

// scriptHook is a go-redis hook on every simulated client. It learns which
// operation each script (by SHA-1) belongs to, so the server's slow log
// can be read per operation, and it times the registry read a routing
// decision makes inside the router.
type scriptHook struct {
	rec *recorder

	mu   sync.Mutex
	shas map[string]map[string]bool // sha -> operations it was called under
}

func newScriptHook(rec *recorder) *scriptHook {
	return &scriptHook{rec: rec, shas: map[string]map[string]bool{}}
}

var _ redis.Hook = (*scriptHook)(nil)

func (h *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		op, _ := ctx.Value(opKey{}).(string)
		class := h.learn(op, cmd.Args())
		if op == OpEnqueue && class == classRegistryRead {
			start := time.Now()
			err := next(ctx, cmd)
			h.rec.add(OpRouteRead, time.Since(start), err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		op, _ := ctx.Value(opKey{}).(string)
		for _, c := range cmds {
			h.learn(op, c.Args())
		}
		return next(ctx, cmds)
	}
}

// classRegistryRead names the registry's read script (one key, host:live):
// every reader of the registry runs it, so it is named by what it is.
const classRegistryRead = "registry read script"

// learn records the script args call under op and returns its class.
func (h *scriptHook) learn(op string, args []any) string {
	if len(args) < 3 {
		return ""
	}
	name, _ := args[0].(string)
	name = strings.ToLower(name)
	if name != "evalsha" && name != "eval" {
		return ""
	}
	sha, _ := args[1].(string)
	if name == "eval" {
		sum := sha1.Sum([]byte(sha))
		sha = hex.EncodeToString(sum[:])
	}
	class := op
	if isRegistryRead(args) {
		class = classRegistryRead
	}
	if class == "" {
		class = "other"
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shas[sha] == nil {
		h.shas[sha] = map[string]bool{}
	}
	h.shas[sha][class] = true
	return class
}

func isRegistryRead(args []any) bool {
	n, _ := args[2].(int)
	if n == 0 {
		if s, ok := args[2].(string); ok {
			n, _ = strconv.Atoi(s)
		}
	}
	if n != 1 || len(args) < 4 {
		return false
	}
	k, _ := args[3].(string)
	return k == registry.LiveKey
}

// className names a script sha by the operations that called it.
func (h *scriptHook) className(sha string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ops := slices.Sorted(maps.Keys(h.shas[sha]))
	if len(ops) == 0 {
		return "script " + sha[:min(8, len(sha))]
	}
	return "script: " + strings.Join(ops, ", ")
}

// serverSnapshot is what is read from INFO at each end of the window.
type serverSnapshot struct {
	calls   map[string]int64
	usec    map[string]int64
	cpu     time.Duration
	memory  int64
	clients int64
	peakMem int64
}

func readServer(ctx context.Context, c *redis.Client) (serverSnapshot, error) {
	raw, err := c.Info(ctx, "commandstats", "cpu", "memory", "clients").Result()
	if err != nil {
		return serverSnapshot{}, fmt.Errorf("info: %w", err)
	}
	return parseInfo(raw), nil
}

// parseInfo reads the sections readServer asks for; lines it does not
// know are skipped.
func parseInfo(raw string) serverSnapshot {
	s := serverSnapshot{calls: map[string]int64{}, usec: map[string]int64{}}
	sc := bufio.NewScanner(strings.NewReader(raw))
	for sc.Scan() {
		key, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(key, "cmdstat_"):
			name := strings.TrimPrefix(key, "cmdstat_")
			for field := range strings.SplitSeq(val, ",") {
				k, v, _ := strings.Cut(field, "=")
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					continue
				}
				switch k {
				case "calls":
					s.calls[name] = n
				case "usec":
					s.usec[name] = n
				}
			}
		case key == "used_cpu_user" || key == "used_cpu_sys":
			if f, err := strconv.ParseFloat(val, 64); err == nil && f >= 0 {
				s.cpu += time.Duration(f * float64(time.Second))
			}
		case key == "used_memory":
			s.memory, _ = strconv.ParseInt(val, 10, 64)
		case key == "used_memory_peak":
			s.peakMem, _ = strconv.ParseInt(val, 10, 64)
		case key == "connected_clients":
			s.clients, _ = strconv.ParseInt(val, 10, 64)
		}
	}
	return s
}

// CommandRate is one command's share of the server's work in the window.
type CommandRate struct {
	Command string  `json:"command"`
	PerSec  float64 `json:"perSec"`
	// UsecPerCall is the server's time per call (commandstats usec over
	// calls); inside a script it counts the script's own commands too.
	UsecPerCall float64 `json:"usecPerCall"`
	// Share is this command's share of the time the server spent in
	// commands (commandstats usec).
	Share float64 `json:"share"`
}

// commandRates subtracts two snapshots (INFO left out), busiest first.
func commandRates(before, after serverSnapshot, window time.Duration) []CommandRate {
	var total int64
	for name, u := range after.usec {
		if name != "info" {
			total += u - before.usec[name]
		}
	}
	var out []CommandRate
	for name, a := range after.calls {
		n := a - before.calls[name]
		if name == "info" || n <= 0 {
			continue
		}
		u := after.usec[name] - before.usec[name]
		cr := CommandRate{Command: name, PerSec: float64(n) / window.Seconds(), UsecPerCall: float64(u) / float64(n)}
		if total > 0 {
			cr.Share = float64(u) / float64(total)
		}
		out = append(out, cr)
	}
	slices.SortFunc(out, func(a, b CommandRate) int {
		if a.PerSec != b.PerSec {
			if a.PerSec > b.PerSec {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Command, b.Command)
	})
	return out
}

// ServerTime is the server's own time for one kind of call, from the slow
// log with every call logged: what a call costs Valkey's one thread,
// without the network or the client.
type ServerTime struct {
	Class string        `json:"class"`
	Count int           `json:"count"`
	P50   time.Duration `json:"p50"`
	P99   time.Duration `json:"p99"`
	Max   time.Duration `json:"max"`
}

// slowlogMaxLen bounds the entries the slow log keeps in its window.
const slowlogMaxLen = 300_000

// serverTimes logs every call for d, then reads the slow log and groups
// the durations by script (named by the operations that ran it) or
// command. The server's settings are put back afterwards.
func serverTimes(ctx context.Context, c *redis.Client, hook *scriptHook, d time.Duration) ([]ServerTime, int, error) {
	prev, err := c.ConfigGet(ctx, "slowlog-*").Result()
	if err != nil {
		return nil, 0, fmt.Errorf("read slowlog settings: %w", err)
	}
	restore := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for k, v := range prev {
			_ = c.ConfigSet(rctx, k, v).Err()
		}
		_ = c.Do(rctx, "SLOWLOG", "RESET").Err()
	}
	defer restore()
	if err := c.ConfigSet(ctx, "slowlog-max-len", strconv.Itoa(slowlogMaxLen)).Err(); err != nil {
		return nil, 0, fmt.Errorf("set slowlog-max-len: %w", err)
	}
	if err := c.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		return nil, 0, err
	}
	if err := c.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		return nil, 0, fmt.Errorf("set slowlog-log-slower-than: %w", err)
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	if err := c.ConfigSet(ctx, "slowlog-log-slower-than", prev["slowlog-log-slower-than"]).Err(); err != nil {
		return nil, 0, err
	}
	raw, err := c.Do(ctx, "SLOWLOG", "GET", "-1").Slice()
	if err != nil {
		return nil, 0, fmt.Errorf("slowlog get: %w", err)
	}
	by := map[string][]time.Duration{}
	for _, e := range raw {
		f, ok := e.([]any)
		if !ok || len(f) < 4 {
			continue
		}
		us, _ := f[2].(int64)
		args, _ := f[3].([]any)
		if len(args) == 0 {
			continue
		}
		name, _ := args[0].(string)
		name = strings.ToLower(name)
		class := name
		switch name {
		case "evalsha":
			if len(args) > 1 {
				sha, _ := args[1].(string)
				class = hook.className(sha)
			}
		case "config", "slowlog", "info":
			continue
		}
		by[class] = append(by[class], time.Duration(us)*time.Microsecond)
	}
	out := make([]ServerTime, 0, len(by))
	for class, s := range by {
		slices.Sort(s)
		out = append(out, ServerTime{Class: class, Count: len(s), P50: rank(s, 50), P99: rank(s, 99), Max: s[len(s)-1]})
	}
	slices.SortFunc(out, func(a, b ServerTime) int { return b.Count - a.Count })
	return out, len(raw), nil
}

// processCPU is this process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAverage is the 1-minute load average, or "" where /proc has none.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
