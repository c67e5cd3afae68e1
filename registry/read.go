package registry

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/bounded"
)

// Host is one live row as a reader sees it, re-validated: every field holds a
// value that passed the content rule, or its zero value.
type Host struct {
	Name        string
	Age         time.Duration // since the last beat, by the server's clock
	AgeKnown    bool          // false: an undatable row, never evidence of life
	BeatAt      time.Time     // the last beat (server clock); zero when unknown
	StartedAt   time.Time     // the host's first beat (server clock); zero when unknown
	Version     string
	Image       string
	ImageDigest string
	Concurrency int
	Pid         int
	Instance    string
	Routes      bool
	Caps        string // serialized tokens, re-parsed
	TZ          string
	// FPCron is the peer's cron fingerprint, "" when it abstains, or
	// InvalidFingerprint when it published something that is not one: an opinion
	// nobody can agree with, so the cron gate refuses rather than treating an
	// unreadable peer as abstaining.
	FPCron    string
	CronCount int
	// Problems lists what was refused in this row ("caps: junk tokens dropped"),
	// for doctor and the hosts view. A row with problems is still returned.
	Problems []string
	// Untrusted is set by Trust when the row does not carry the fleet key's
	// signature: anyone who can write Valkey may have written it. Routing
	// ignores such a row; the hosts view shows it.
	Untrusted bool

	// signed is the row as published, for the signature's check.
	signed map[string]string
	sig    string
}

// SignedBy reports whether the row carries k's signature of what it holds.
func (h Host) SignedBy(k fleet.Key) bool {
	return h.signed != nil && k.VerifyRow(h.signed, h.sig)
}

// Trust marks every row that k did not sign Untrusted, in place, and
// returns hosts. With no key nothing can be checked, so a row is trusted
// only when its host queue takes unsigned jobs (unsigned, the operator's
// PI_UNSIGNED_QUEUES): a row steers jobs to its queue, and a Valkey writer
// must not steer them to a queue nobody drains, or one it reads itself.
func Trust(hosts []Host, k fleet.Key, unsigned []string) []Host {
	for i := range hosts {
		if k.IsSet() {
			hosts[i].Untrusted = !hosts[i].SignedBy(k)
		} else {
			hosts[i].Untrusted = !fleet.UnsignedAllowed(unsigned, fleet.HostQueueName(hosts[i].Name))
		}
	}
	return hosts
}

// InvalidFingerprint stands in for a peer's fpCron that is not a fingerprint.
const InvalidFingerprint = "invalid"

// futureSlack is how far ahead of the server's TIME a beatAt may be and still
// count (as age 0): a failover to a replica whose clock is slightly behind.
// A row dated further ahead was not written by our beat script.
const futureSlack = time.Second

// Capability is the host as the router consumes it.
func (h Host) Capability() capabilities.Host {
	return capabilities.Host{Name: h.Name, Caps: h.Caps, Routes: h.Routes, Age: h.Age, AgeKnown: h.AgeKnown, Untrusted: h.Untrusted}
}

// CapabilityHosts converts rows for capabilities.Route.
func CapabilityHosts(hosts []Host) []capabilities.Host {
	out := make([]capabilities.Host, len(hosts))
	for i, h := range hosts {
		out[i] = h.Capability()
	}
	return out
}

// ReadLive returns every live row, sorted by name, in one round trip; see the
// package function ReadLive. Rows refused whole (a bad name) are logged once
// each as host_registry_row_refused.
func (r *Registry) ReadLive(ctx context.Context) ([]Host, error) {
	hosts, refused, err := readLive(ctx, r.client, r.cfg.CallTimeout, &r.calls)
	for _, d := range refused {
		if r.dropped.first(d.member + "\x00" + d.rule) {
			r.log.Warn("host_registry_row_refused", "peer", clip(d.member), "rule", d.rule)
		}
	}
	return hosts, err
}

// LivePeers is ReadLive without this host's own row.
func (r *Registry) LivePeers(ctx context.Context) ([]Host, error) {
	hosts, err := r.ReadLive(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(hosts, func(h Host) bool { return h.Name == r.name }), nil
}

// ReadLive reads every live row in one round trip (one script), for a reader
// that publishes nothing (doctor, the kill switch, a front-end's router). The
// call is bounded by timeout. Ages are computed against the server's TIME read
// in the same script, so no local clock is involved. Members whose row has
// expired are pruned. Rows with an invalid name are dropped; other bad values
// are emptied and listed in Host.Problems; fields this package does not know
// are never fetched.
//
// A failure returns an error wrapping ErrUnreachable; no hosts is an empty
// slice and a nil error.
func ReadLive(ctx context.Context, client redis.UniversalClient, timeout time.Duration) ([]Host, error) {
	var calls bounded.Calls
	hosts, _, err := readLive(ctx, client, cmp.Or(timeout, DefaultCallTimeout), &calls)
	return hosts, err
}

// refusedRow is a row dropped whole.
type refusedRow struct{ member, rule string }

// readArgs is the read script's ARGV: the row key prefix, then field, limit
// pairs. Built once.
var readArgs = func() []any {
	args := []any{rowKeyPrefix}
	for _, f := range rowFields {
		args = append(args, f, maxLen(f))
	}
	return args
}()

func readLive(ctx context.Context, client redis.UniversalClient, timeout time.Duration, calls *bounded.Calls) ([]Host, []refusedRow, error) {
	res, err := bounded.Call(ctx, timeout, calls, nil, func(ctx context.Context) (any, error) {
		return readScript.Run(ctx, client, []string{LiveKey}, readArgs...).Result()
	})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: read: %w", ErrUnreachable, err)
	}
	out, ok := res.([]any)
	if !ok || len(out) < 2 || len(out)%2 != 0 {
		return nil, nil, fmt.Errorf("%w: read: unexpected reply", ErrUnreachable)
	}
	now, err := serverMillis(out[0], out[1])
	if err != nil {
		return nil, nil, fmt.Errorf("%w: read: %w", ErrUnreachable, err)
	}
	hosts := make([]Host, 0, (len(out)-2)/2)
	var refused []refusedRow
	for i := 2; i < len(out); i += 2 {
		member, _ := out[i].(string)
		raw, _ := out[i+1].([]any)
		if err := fleet.ValidateName(member); err != nil {
			refused = append(refused, refusedRow{member: member, rule: "invalid-name"})
			continue
		}
		if len(raw) != len(rowFields) {
			refused = append(refused, refusedRow{member: member, rule: "malformed-row"})
			continue
		}
		var vals rowValues
		for j := range rowFields {
			vals[j], _ = raw[j].(string)
		}
		signed := signedFields(vals.get)
		sig := vals.get(FieldSig)
		h := parseRow(member, &vals, now)
		h.signed, h.sig = signed, sig
		hosts = append(hosts, h)
	}
	slices.SortFunc(hosts, func(a, b Host) int { return cmp.Compare(a.Name, b.Name) })
	return hosts, refused, nil
}

// serverMillis reads TIME's seconds and microseconds as ms since the epoch.
func serverMillis(sec, usec any) (int64, error) {
	s, ok1 := sec.(string)
	u, ok2 := usec.(string)
	sv, ok3 := parseDigits(s)
	uv, ok4 := parseDigits(u)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return 0, fmt.Errorf("unreadable server TIME %v %v", sec, usec)
	}
	return sv*1000 + uv/1000, nil
}

// parseDigits parses a non-negative decimal integer strictly: ASCII digits
// only, no sign, no spaces, no trailing junk, at most 18 digits.
func parseDigits(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// rowValues holds one row's values in rowFields order.
type rowValues [len(rowFields)]string

// get returns the value of field.
func (v *rowValues) get(field string) string { return v[fieldIndex[field]] }

// fieldIndex is each row field's position in rowFields.
var fieldIndex = func() map[string]int {
	m := make(map[string]int, len(rowFields))
	for i, f := range rowFields {
		m[f] = i
	}
	return m
}()

// parseRow re-validates one peer-written row. now is the server's time in ms.
func parseRow(name string, vals *rowValues, now int64) Host {
	h := Host{Name: name}
	problem := func(field, what string) { h.Problems = append(h.Problems, field+": "+what) }

	// Every value first passes the content rule a writer applies; a refused one
	// is emptied. beatAt and the integers are checked by their parsers below.
	for i, f := range rowFields {
		v := vals[i]
		if len(v) > maxLen(f) {
			problem(f, "too long")
			vals[i] = ""
			continue
		}
		if f == FieldFPCron || f == FieldCaps {
			continue // judged below: both have their own failure value
		}
		if rule := refuseRule(f, v); rule != "" {
			problem(f, rule)
			vals[i] = ""
		}
	}

	if v := vals.get(FieldName); v != "" && v != name {
		problem(FieldName, "differs from the row's key")
	}
	if beat, ok := parseDigits(vals.get(FieldBeatAt)); ok && beat > 0 {
		h.BeatAt = time.UnixMilli(beat)
		age := time.Duration(now-beat) * time.Millisecond
		switch {
		case age >= 0:
			h.Age, h.AgeKnown = age, true
		case -age <= futureSlack:
			h.Age, h.AgeKnown = 0, true
		default:
			problem(FieldBeatAt, "in the future")
		}
	} else {
		problem(FieldBeatAt, "not a timestamp")
	}
	if v := vals.get(FieldStartedAt); v != "" {
		if ms, ok := parseDigits(v); ok && ms > 0 {
			h.StartedAt = time.UnixMilli(ms)
		} else {
			problem(FieldStartedAt, "not a timestamp")
		}
	}
	h.Concurrency = parseCount(vals.get(FieldConcurrency), FieldConcurrency, problem)
	h.Pid = parseCount(vals.get(FieldPid), FieldPid, problem)
	h.CronCount = parseCount(vals.get(FieldCronCount), FieldCronCount, problem)

	h.Version = vals.get(FieldVersion)
	h.Image = vals.get(FieldImage)
	h.ImageDigest = vals.get(FieldImageDigest)
	h.Instance = vals.get(FieldInstance)
	h.TZ = vals.get(FieldTZ)

	switch v := vals.get(FieldRoutes); v {
	case "true":
		h.Routes = true
	case "false", "":
	default:
		problem(FieldRoutes, "not true or false")
	}

	if raw := vals.get(FieldCaps); raw != "" {
		h.Caps = cleanCaps(raw)
		if h.Caps != raw {
			problem(FieldCaps, "junk tokens dropped")
		}
	}

	switch fp := vals.get(FieldFPCron); {
	case fp == "":
	case refuseRule(FieldFPCron, fp) == "":
		h.FPCron = fp
	default:
		h.FPCron = InvalidFingerprint
		problem(FieldFPCron, "not a fingerprint")
	}
	return h
}

// parseCount parses a non-negative integer field; "" is unknown (0).
func parseCount(v, field string, problem func(field, what string)) int {
	if v == "" {
		return 0
	}
	n, ok := parseDigits(v)
	if !ok || n > 1<<31-1 {
		problem(field, "not a non-negative integer")
		return 0
	}
	return int(n)
}

// clip shortens a peer-written value for a log line.
func clip(s string) string {
	const limit = 80
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:limit]) + "..."
}
