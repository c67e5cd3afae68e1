package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/registry"
	"github.com/redis/go-redis/v9"
)

func init() {
	register(command{name: "hosts", killSwitch: true, summary: "the fleet's live hosts from the registry (--json for one JSON array)", help: hostsHelp, run: runHosts})
}

// hostJSON is one host of `hosts --json`: the row as read, full values.
type hostJSON struct {
	Name        string   `json:"name"`
	AgeMs       *int64   `json:"ageMs"` // null: the row cannot be dated
	Routes      bool     `json:"routes"`
	Caps        string   `json:"caps"`
	Concurrency int      `json:"concurrency"`
	Image       string   `json:"image"`
	ImageDigest string   `json:"imageDigest"`
	Version     string   `json:"version"`
	TZ          string   `json:"tz"`
	FPCron      string   `json:"fpCron"`
	CronCount   int      `json:"cronCount"`
	BeatAt      string   `json:"beatAt"`
	StartedAt   string   `json:"startedAt"`
	Pid         int      `json:"pid"`
	Problems    []string `json:"problems,omitempty"`
	// Untrusted: the fleet key (PI_FLEET_KEY_FILE) is set here and the
	// row does not carry its signature, or no key is set and the host's
	// queue is not in PI_UNSIGNED_QUEUES; routing ignores the host.
	Untrusted bool `json:"untrusted,omitempty"`
}

func runHosts(ctx context.Context, e env, args []string) int {
	asJSON, code, done := parseHostsArgs(e, args)
	if done {
		return code
	}
	key, code := fleetKeyFromEnv(e, "hosts")
	if code != exitOK {
		return code
	}
	client, url, code := ksConnect(e, "hosts")
	if code != exitOK {
		return code
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, ksCommandTimeout)
	defer cancel()
	hosts, err := operator.Hosts(ctx, client)
	if err != nil {
		return ksUnreachable(e.stderr, url, err)
	}
	hosts = registry.Trust(hosts, key, config.SplitQueues(e.getenv("PI_UNSIGNED_QUEUES")))
	if asJSON {
		out := make([]hostJSON, len(hosts))
		for i, h := range hosts {
			out[i] = toHostJSON(h)
		}
		return writeJSONLine(e, "hosts", out)
	}
	if len(hosts) == 0 {
		fmt.Fprintf(e.stdout, "no hosts: no worker has a registry row at %s (a worker beats every 15s; a row expires 90s after its last beat)\n", url)
		return exitOK
	}
	if err := printHosts(e.stdout, hosts); err != nil {
		return exitFailure
	}
	printHostNotes(ctx, e, client, hosts)
	return exitOK
}

// parseHostsArgs reads hosts' only flag, --json; done means the command ends with code (help printed, or a bad argument named).
func parseHostsArgs(e env, args []string) (asJSON bool, code int, done bool) {
	for _, a := range args {
		switch a {
		case "--json", "-json":
			asJSON = true
		case "-h", "--help":
			fmt.Fprintln(e.stdout, "usage: pi-dispatch hosts [--json]")
			return false, exitOK, true
		default:
			fmt.Fprintf(e.stderr, "pi-dispatch hosts: unexpected argument %q (usage: pi-dispatch hosts [--json])\n", a)
			return false, exitUsage, true
		}
	}
	return asJSON, exitOK, false
}

// printHosts writes the hosts as a table, one row each, for a person.
func printHosts(w io.Writer, hosts []registry.Host) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tAGE\tROUTES\tCAPS\tCONCURRENCY\tDIGEST\tTZ\tCRON")
	for _, h := range hosts {
		name := h.Name
		if h.Untrusted {
			name += " (untrusted)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			name, hostAge(h), yesNo(h.Routes), orDash(h.Caps), concurrency(h.Concurrency),
			shortDigest(h.ImageDigest), orDash(h.TZ), shortFingerprint(h.FPCron))
	}
	return tw.Flush()
}

// printHostNotes says, under the table, what the rows do not: held jobs, untrusted rows and refused values.
func printHostNotes(ctx context.Context, e env, client *redis.Client, hosts []registry.Host) {
	if held, err := fleetstate.HeldCount(ctx, client); err == nil && held > 0 {
		fmt.Fprintf(e.stdout, "held: %d job(s) waiting on their wait-for conditions (any capable host continues them)\n", held)
	}
	for _, h := range hosts {
		if h.Untrusted {
			fmt.Fprintf(e.stdout, "untrusted: %s: the row carries no valid signature of the fleet key, so anyone who can write Valkey may have written it; routing ignores it\n", h.Name)
		}
		if len(h.Problems) > 0 {
			fmt.Fprintf(e.stdout, "note: %s published values that were refused: %s\n", h.Name, strings.Join(h.Problems, "; "))
		}
	}
}

func toHostJSON(h registry.Host) hostJSON {
	j := hostJSON{
		Name: h.Name, Routes: h.Routes, Caps: h.Caps, Concurrency: h.Concurrency,
		Image: h.Image, ImageDigest: h.ImageDigest, Version: h.Version, TZ: h.TZ,
		FPCron: h.FPCron, CronCount: h.CronCount, Pid: h.Pid, Problems: h.Problems, Untrusted: h.Untrusted,
		BeatAt: timeOrEmpty(h.BeatAt), StartedAt: timeOrEmpty(h.StartedAt),
	}
	if h.AgeKnown {
		ms := h.Age.Milliseconds()
		j.AgeMs = &ms
	}
	return j
}

func timeOrEmpty(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// hostAge is the time since the last beat, to the second; "?" for a row that
// cannot be dated (never evidence of life).
func hostAge(h registry.Host) string {
	if !h.AgeKnown {
		return "?"
	}
	return h.Age.Round(time.Second).String()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func concurrency(n int) string {
	if n <= 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// shortDigest is the first 12 hex digits of an image id, as docker prints it.
func shortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if d == "" {
		return "-"
	}
	return d[:min(len(d), 12)]
}

// shortFingerprint is the first 8 hex digits of a cron fingerprint; "-" when
// the host abstains.
func shortFingerprint(fp string) string {
	if fp == "" {
		return "-"
	}
	if fp == registry.InvalidFingerprint {
		return fp
	}
	return fp[:min(len(fp), 8)]
}
