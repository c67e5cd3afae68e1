package operator

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/lease"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// explainReadTimeout bounds the registry read of one Explain.
const explainReadTimeout = 2 * time.Second

// holding reports whether a finding code stops the job, as opposed to a
// note about it (a local scope, a delay, a part that could not be read).
func holding(code string) bool {
	switch code {
	case FindScopeLocal, FindDelayed, FindUnread, FindReady:
		return false
	}
	return true
}

// pending explains a job that is not running: each check adds what holds it,
// in the gate ladder's terms; nothing found is "ready".
func (x *explainer) pending(ctx context.Context) error {
	if err := x.paused(ctx); err != nil {
		return err
	}
	hosts := x.hosts(ctx)
	x.signed()
	if x.spec == nil {
		x.add(FindInvalidJob, "its data does not parse: the first worker to take it refuses it invalid-job", nil)
	} else {
		now := x.opts.Now()
		x.pauseWindow(now)
		x.hold(ctx)
		x.thread(ctx)
		x.scope(ctx)
		x.budget(ctx)
		x.fit(hosts)
		x.sources(ctx)
	}
	x.delayed()
	for _, f := range x.ex.Findings {
		if holding(f.Code) {
			return nil
		}
	}
	if x.job.State != queue.StateDelayed {
		x.add(FindReady, fmt.Sprintf("nothing holds it: it waits on %s for a free worker slot", x.ex.Queue), nil)
	}
	return nil
}

// signed says when the worker's signature gate will refuse the job, by
// the gate's own rule (a scheduler's run and a queue allowed unsigned jobs
// pass; without a key nothing else does), for a worker configured as this
// command is.
func (x *explainer) signed() {
	key, j := x.opts.FleetKey, x.job
	if j.SchedulerID != "" || (x.spec != nil && x.spec.Kind == jobs.KindCron) || fleet.UnsignedAllowed(x.opts.UnsignedQueues, x.ex.Queue) {
		return
	}
	if !key.IsSet() {
		x.add(FindJobUnsigned, fmt.Sprintf("no fleet key here (PI_FLEET_KEY_FILE) and PI_UNSIGNED_QUEUES does not list %s: a worker configured alike refuses it job-unsigned", x.ex.Queue), nil)
		return
	}
	if key.VerifyJob(x.ex.Queue, j.ID, j.Data, j.Signature) {
		return
	}
	why := "a signature that does not verify for this queue and id"
	if j.Signature == "" {
		why = "no signature"
	}
	x.add(FindJobUnsigned, fmt.Sprintf("it carries %s of the fleet key: the first worker to take it refuses it job-unsigned (a party without the key wrote it, or moved it)", why), nil)
}

// paused: the fleet pause flag and the queue's own pause, which the kill
// switch sets together; either stops every consumer of the queue.
func (x *explainer) paused(ctx context.Context) error {
	flag, err := x.client.Exists(ctx, fleetstate.PausedKey).Result()
	if err != nil {
		return err
	}
	q, err := x.dir.Queue(x.ex.Queue)
	if err != nil {
		return err
	}
	qp, err := q.IsPaused(ctx)
	if err != nil {
		return err
	}
	switch {
	case flag == 1:
		x.add(FindFleetPaused, "not running: the fleet is paused (pi-dispatch resume)", map[string]any{"queuePaused": qp})
	case qp:
		x.add(FindQueuePaused, fmt.Sprintf("not running: its queue %s is paused, the fleet flag is not (pi-dispatch resume resumes every queue)", x.ex.Queue), nil)
	}
	return nil
}

// hosts reads the live registry rows and says when nobody can take the job
// from its queue: its host queue's host is gone or stale, or no host lives.
func (x *explainer) hosts(ctx context.Context) []registry.Host {
	hosts, err := registry.ReadLive(ctx, x.client, explainReadTimeout)
	if err != nil {
		x.unread("the registry", err)
		return nil
	}
	hosts = registry.Trust(hosts, x.opts.FleetKey, x.opts.UnsignedQueues)
	name, onHost := strings.CutPrefix(x.ex.Queue, fleet.HostQueuePrefix)
	if !onHost {
		if len(hosts) == 0 {
			x.add(FindNoHosts, fmt.Sprintf("no worker has a live registry row: nothing takes jobs from %s (start a worker)", x.ex.Queue), nil)
		}
		return hosts
	}
	for _, h := range hosts {
		if h.Name != name {
			continue
		}
		if h.Untrusted {
			words := fmt.Sprintf("routed to host %s, whose registry row carries no valid signature of the fleet key: anyone who can write Valkey may have written it, and routing ignores it", name)
			if !x.opts.FleetKey.IsSet() {
				words = fmt.Sprintf("routed to host %s, whose registry row no fleet key can check here (PI_FLEET_KEY_FILE unset) and whose queue PI_UNSIGNED_QUEUES does not list: routing ignores it", name)
			}
			x.add(FindHostUntrusted, words, map[string]any{"host": name})
		}
		if !h.AgeKnown || h.Age > capabilities.RouteFresh {
			age := "an undatable beat"
			if h.AgeKnown {
				age = "its last beat " + h.Age.Round(time.Second).String() + " ago"
			}
			x.add(FindHostStale, fmt.Sprintf("routed to host %s, whose registry row is stale (%s): it may be frozen or stopping", name, age),
				map[string]any{"host": name, "ageMs": ageMs(h)})
		}
		return []registry.Host{h}
	}
	x.add(FindHostGone, fmt.Sprintf("routed to host %s, which has no live registry row: it is stopped or gone, and only it takes jobs from %s (start it, or cancel the job and queue it again)", name, x.ex.Queue),
		map[string]any{"host": name})
	return nil
}

func ageMs(h registry.Host) any {
	if !h.AgeKnown {
		return nil
	}
	return h.Age.Milliseconds()
}

// pauseWindow evaluates this host's pause windows with the gate's matcher.
func (x *explainer) pauseWindow(now time.Time) {
	until, ok := x.opts.PauseWindows.Match(x.spec.Scope(), now)
	if !ok || until.Sub(now) <= time.Second {
		return
	}
	x.add(FindPauseWindow, fmt.Sprintf("not running: a pause window of this host matches its scope until %s (PI_PAUSE_WINDOWS_FILE)", fmtTime(until)),
		map[string]any{"until": until.UTC(), "scope": x.spec.Scope()})
}

// hold reads the job's hold state, as the hold gate continues it.
func (x *explainer) hold(ctx context.Context) {
	conds := x.spec.WaitFor
	if len(conds) == 0 {
		return
	}
	st, err := x.client.HGetAll(ctx, fleetstate.WaitJobKey(x.job.ID)).Result()
	if err != nil {
		x.unread("the hold state", err)
		return
	}
	h := parseHold(st)
	met := holdConditions(conds, h.met, h.since, x.opts.Now())
	data := map[string]any{"conditions": met, "begun": len(st) > 0}
	switch {
	case len(st) == 0:
		x.add(FindWaitHold, fmt.Sprintf("waits for its %d wait-for condition(s); no hold has begun yet (the first worker to take it checks them)", len(conds)), data)
		return
	case h.superseded:
		data["superseded"] = true
		x.add(FindWaitHold, "its hold was superseded by a newer delivery of the same dedup id: the next worker refuses it wait-superseded", data)
		return
	case h.released:
		data["released"] = true
		x.add(FindWaitHold, "its wait-for conditions are met: the hold is released and the next worker runs it", data)
		return
	}
	data["checks"], data["faults"], data["throttles"], data["since"] = h.checks, h.faults, h.throttles, timeOrZero(h.since)
	words := fmt.Sprintf("held on its wait-for conditions since %s: %d of %d met, %d check(s) made", fmtTime(h.since), metCount(met), len(conds), h.checks)
	if h.faults > 0 {
		words += fmt.Sprintf(", %d faulted in a row", h.faults)
	}
	if at, ok := x.dueAt(); ok {
		data["nextCheckAt"] = at
		words += ", next check about " + fmtTime(at)
	}
	x.add(FindWaitHold, words, data)
}

// holdState is a wait:job:<id> hash as the hold scripts read it: junk a
// peer wrote reads as 0.
type holdState struct {
	since                     time.Time
	checks, faults, throttles int
	met                       uint8
	released, superseded      bool
}

func parseHold(m map[string]string) holdState {
	num := func(k string) int64 {
		var n int64
		if _, err := fmt.Sscan(m[k], &n); err != nil || n < 0 || n > 1e15 {
			return 0
		}
		return n
	}
	h := holdState{
		checks: int(num("checks")), faults: int(num("faults")), throttles: int(num("throttles")),
		met: uint8(num("met") & 0x0F), released: m["released"] == "1", superseded: m["superseded"] == "1",
	}
	if ms := num("since"); ms > 0 {
		h.since = time.UnixMilli(ms)
	}
	return h
}

// holdConditions says which conditions are met: a profile condition by its
// bit in the hold state, an `after` one by the clock, counted from the
// hold's start as the hold gate counts it (jobs.WaitCondition).
func holdConditions(conds []jobs.WaitCondition, met uint8, since, now time.Time) []map[string]any {
	out := make([]map[string]any, len(conds))
	for i, c := range conds {
		out[i] = map[string]any{"met": met&(1<<i) != 0}
		if c.Profile != "" {
			out[i]["profile"] = c.Profile
			continue
		}
		out[i]["after"] = c.After
		d, at, rule := jobs.ParseAfter(c.After)
		if rule != "" {
			continue
		}
		if at.IsZero() && !since.IsZero() {
			at = since.Add(d)
		}
		if !at.IsZero() {
			out[i]["at"] = at.UTC()
			out[i]["met"] = !now.Before(at)
		}
	}
	return out
}

func metCount(conds []map[string]any) int {
	c := 0
	for _, m := range conds {
		if m["met"] == true {
			c++
		}
	}
	return c
}

// dueAt estimates when a delayed job is due: the worker defers it right
// after taking it, by Delay from then.
func (x *explainer) dueAt() (time.Time, bool) {
	j := x.job
	if j.State != queue.StateDelayed || j.Delay <= 0 {
		return time.Time{}, false
	}
	from := cmp.Or(j.ProcessedOn, j.Timestamp)
	if from.IsZero() {
		return time.Time{}, false
	}
	return from.Add(j.Delay).UTC(), true
}

// delayed notes a delayed job's due time.
func (x *explainer) delayed() {
	if x.job.State != queue.StateDelayed {
		return
	}
	words := "delayed: deferred by a gate or backing off before a retry"
	data := map[string]any{"delayMs": x.job.Delay.Milliseconds()}
	if at, ok := x.dueAt(); ok {
		words += ", due about " + fmtTime(at)
		data["dueAt"] = at
	}
	x.add(FindDelayed, words, data)
}

// thread applies the thread gate's rule: a forge job waits while another
// job holds its issue or pull request, or an older one is lined up first.
func (x *explainer) thread(ctx context.Context) {
	thread := x.spec.Thread()
	if x.spec.Forge == "" || thread == "" {
		return
	}
	line, holder, err := fleetstate.ReadThread(ctx, x.client, thread)
	if err != nil {
		x.unread("the thread's line", err)
		return
	}
	before := line
	if i := slices.Index(line, x.job.ID); i >= 0 {
		before = line[:i]
	}
	switch {
	case holder != "" && holder != x.job.ID:
		x.add(FindThreadBusy, fmt.Sprintf("%s is busy: job %s holds it; one job of a thread runs at a time", thread, holder),
			map[string]any{"thread": thread, "holder": holder, "ahead": before})
	case holder == "" && len(before) > 0:
		x.add(FindThreadBusy, fmt.Sprintf("%s: %d older job(s) of the thread go first (%s)", thread, len(before), strings.Join(before, ", ")),
			map[string]any{"thread": thread, "ahead": before})
	}
}

// scope applies the scope-slot gate's rule (dispatch's takeScope): a folder
// is its own mutex on each host; a repository scope with a concurrent limit
// takes fleet-wide slots, whose holders are <name>#<jobId>.
func (x *explainer) scope(ctx context.Context) {
	scope := x.spec.Scope()
	if scope == "" {
		return
	}
	limit, limited := x.opts.ScopedLimits.Lookup(scope)
	if x.spec.Folder != "" {
		x.add(FindScopeLocal, "one job per folder at a time: counted on the host that takes it, not visible fleet-wide", map[string]any{"scope": scope})
		return
	}
	if !limited || limit.Concurrent <= 0 {
		return
	}
	hash := fleet.ScopeHash(scope)
	held, err := lease.ReadHolders(ctx, x.client, limit.Concurrent, func(i int) string { return fleet.ScopeSlotKey(hash, i) })
	if err != nil {
		x.unread("the scope slots", err)
		return
	}
	holders := make([]map[string]any, len(held))
	for i, h := range held {
		holders[i] = map[string]any{"slot": h.Slot, "host": h.Host, "jobId": h.ID}
	}
	if len(holders) < limit.Concurrent {
		return
	}
	names := make([]string, len(holders))
	for i, h := range holders {
		names[i] = fmt.Sprintf("%s on %s", h["jobId"], cmp.Or(h["host"].(string), "an unnamed host"))
	}
	x.add(FindScopeBusy, fmt.Sprintf("scope %s is busy: its %d fleet-wide slot(s) are held by %s", scope, limit.Concurrent, strings.Join(names, ", ")),
		map[string]any{"scope": scope, "concurrent": limit.Concurrent, "holders": holders})
}

// budget reads the count windows the budget gate reserves against, on the
// server's clock, and says which is at its cap and when it resets.
func (x *explainer) budget(ctx context.Context) {
	now, err := x.client.Time(ctx).Result()
	if err != nil {
		x.unread("the server clock", err)
		return
	}
	windows, err := fleetstate.NewBudget(x.client, fleetstate.BudgetConfig{
		DailyCap: cmp.Or(x.opts.DailyCap, config.DefaultDailyCap), WeeklyCap: x.opts.WeeklyCap, MonthlyCap: x.opts.MonthlyCap,
	}).Windows(ctx)
	if err != nil {
		x.unread("the budget counts", err)
		return
	}
	for _, w := range windows {
		x.window(w.Name, jobs.ReasonOverBudget, w.Count, w.Cap, w.ResetsAt)
	}
	dayReset, weekReset := fleetstate.DayEnd(now), fleetstate.WeekEnd(now)
	limit, ok := x.opts.ScopedLimits.Lookup(x.spec.Scope())
	if !ok || limit.Day <= 0 && limit.Week <= 0 {
		return
	}
	scope := x.spec.Scope()
	vals, err := x.client.MGet(ctx, fleetstate.BudgetScopeDayKey(scope, now), fleetstate.BudgetScopeWeekKey(scope, now)).Result()
	if err != nil {
		x.unread("the scope's budget counts", err)
		return
	}
	x.window(dispatch.WindowScopeDay, jobs.ReasonScopeCap, countOf(vals[0]), limit.Day, dayReset)
	x.window(dispatch.WindowScopeWeek, jobs.ReasonScopeCap, countOf(vals[1]), limit.Week, weekReset)
}

// window adds a budget-full finding when count is at cap (0: no window).
func (x *explainer) window(name string, reason jobs.Reason, count, cap int, resets time.Time) {
	if cap <= 0 || count < cap {
		return
	}
	x.add(FindBudgetFull, fmt.Sprintf("budget window %s is full (%d of %d starts): the next worker refuses it %s; the window resets at %s", name, count, cap, reason, fmtTime(resets)),
		map[string]any{"window": name, "count": count, "cap": cap, "reason": reason, "resetsAt": resets})
}

func countOf(v any) int {
	s, _ := v.(string)
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		return 0
	}
	return n
}

// fit says which hosts that drain the job's queue cannot serve it: one
// that lacks a profile the job names refuses it at the profile gates, and
// one that lacks its image refuses it job-image-missing.
func (x *explainer) fit(hosts []registry.Host) {
	needs := capabilities.Needs(x.spec.SecretsProfile, x.spec.WaitProfiles())
	var capable []registry.Host
	var lacking []string
	for _, h := range hosts {
		if hasAll(capabilities.Parse(h.Caps), needs) {
			capable = append(capable, h)
		} else {
			lacking = append(lacking, h.Name)
		}
	}
	if len(lacking) > 0 {
		reason := string(jobs.ReasonWaitProfileUnknown)
		if x.spec.SecretsProfile != "" {
			reason = string(jobs.ReasonSecretProfileUnknown) + " or " + reason
		}
		x.add(FindNotCapable, fmt.Sprintf("%d of %d live host(s) draining %s do not declare what it needs (%s): %s; one that takes it refuses it %s",
			len(lacking), len(hosts), x.ex.Queue, strings.Join(needs, ", "), strings.Join(lacking, ", "), reason),
			map[string]any{"needs": needs, "lacking": lacking, "hosts": len(hosts)})
	}
	x.image(capable)
}

// image says which of the hosts that can take the job published no digest
// for the image it needs: the registry carries each host's default image
// and its digest, empty when the image was absent at the host's boot.
func (x *explainer) image(capable []registry.Host) {
	var missing, unknown []string
	for _, h := range capable {
		switch {
		case x.spec.Image != "" && x.spec.Image != h.Image:
			unknown = append(unknown, h.Name)
		case h.ImageDigest == "":
			missing = append(missing, h.Name)
		}
	}
	if len(missing) == 0 {
		return
	}
	img := cmp.Or(x.spec.Image, "its default job image (PI_JOB_IMAGE)")
	x.add(FindImageMissing, fmt.Sprintf("%s was not present at boot on %s (%d of %d host(s) that can take it): there it is refused job-image-missing; images are never pulled",
		img, strings.Join(missing, ", "), len(missing), len(capable)),
		map[string]any{"image": x.spec.Image, "missingOn": missing, "unknownOn": unknown, "capableHosts": len(capable)})
}

func hasAll(caps capabilities.Set, needs []string) bool {
	for _, n := range needs {
		if !caps.Has(n) {
			return false
		}
	}
	return true
}

// sources asks each extension source.
func (x *explainer) sources(ctx context.Context) {
	job := ExplainJob{ID: x.job.ID, Queue: x.ex.Queue, State: x.job.State, Spec: x.spec, SchedulerID: x.job.SchedulerID}
	for _, s := range x.opts.Sources {
		fs, err := s.Findings(ctx, job)
		if err != nil {
			x.unread(s.Name(), err)
			continue
		}
		x.ex.Findings = append(x.ex.Findings, fs...)
	}
}

// maxRecordProbe bounds the attempts whose mirrored records one Explain reads.
const maxRecordProbe = 64

// jobRecords reads the job's run records on queue: from the run mirror,
// one key per attempt (1..attempts+1, or up to 25 when attempts is
// unknown), in the current name and the older one without the queue, each
// re-validated and kept only when the key is its own name (a record under
// another queue's key is another job's); else from logsDir. An empty queue
// (the job is gone) reads the shared queue's and the older keys. It says
// where it found them.
func jobRecords(ctx context.Context, client redis.UniversalClient, queueName, jobID string, attempts int, logsDir string) ([]jobs.Record, string) {
	n := min(attempts+1, maxRecordProbe)
	if attempts <= 0 {
		n = 25
	}
	if queueName == "" {
		queueName = fleet.SharedQueue
	}
	keys := make([]string, 0, 2*n)
	members := make([]string, 0, 2*n)
	for i := range n {
		for _, q := range []string{queueName, ""} {
			keys = append(keys, fleetstate.RunRecordKey(q, jobID, i+1))
			members = append(members, jobs.RecordMember(q, jobID, i+1))
		}
	}
	var out []jobs.Record
	if vals, err := client.MGet(ctx, keys...).Result(); err == nil {
		for i, v := range vals {
			s, ok := v.(string)
			if !ok {
				continue
			}
			var rec jobs.Record
			if json.Unmarshal([]byte(s), &rec) == nil && rec.Validate() == nil && jobs.OwnName(members[i], rec) {
				out = append(out, rec)
			}
		}
	}
	if len(out) > 0 {
		return out, RunsFromMirror
	}
	if logsDir == "" {
		return nil, ""
	}
	recs, err := jobs.ReadRecords(logsDir, jobID)
	if err != nil {
		return nil, ""
	}
	recs = slices.DeleteFunc(recs, func(r jobs.Record) bool { return r.Queue != "" && r.Queue != queueName })
	if len(recs) == 0 {
		return nil, ""
	}
	return recs, RunsFromLogsDir
}
