package cronsync

import (
	"context"

	"github.com/pidispatch/pidispatch/registry"
)

// Peers is the host registry as the gate consumes it. *registry.Registry
// implements it.
type Peers interface {
	// Publish beats now, so peers read this host's current fingerprint.
	Publish(ctx context.Context) error
	// LivePeers returns every other live host's row.
	LivePeers(ctx context.Context) ([]registry.Host, error)
}

// Refusal reasons of ReconcileGated (GateResult.Refused).
const (
	// RefusedDivergence: a live peer holds a different opinion of the cron set
	// (another file, another zone, or an unreadable fingerprint).
	RefusedDivergence = "cron-divergence"
	// RefusedOwnUnreadable: this host's file could not be read or parsed, and
	// peers hold opinions it cannot compare with.
	RefusedOwnUnreadable = "own-triggers-unreadable"
	// RefusedCronDisabled: this host has no triggers file configured; it
	// abstains and never reconciles.
	RefusedCronDisabled = "cron-disabled"
)

// PeerView is a peer's cron opinion as the gate saw it.
type PeerView struct {
	Host      string `json:"host"`
	FPCron    string `json:"fpCron"`
	CronCount int    `json:"cronCount"`
}

// GateResult is the gate's decision.
type GateResult struct {
	// Refused is "" when the reconcile ran, else the reason it was withheld
	// (RefusedDivergence, RefusedOwnUnreadable, RefusedCronDisabled). A refusal
	// installs nothing and removes nothing.
	Refused string
	// Mine is this host's fingerprint ("" when it has no opinion).
	Mine string
	// Peers are the peers the decision rests on: the disagreeing ones on a
	// divergence, every opinion on own-triggers-unreadable, the agreeing ones
	// when the reconcile ran.
	Peers []PeerView
	// Result is what the reconcile changed, when it ran.
	Result Result
}

// ReconcileGated reconciles served into store only when every live peer that
// holds an opinion agrees with this host about the authored cron set (the
// original's reconcileGated):
//
//  1. A host without a configured file (own.Configured false) abstains:
//     RefusedCronDisabled, and nothing is touched.
//  2. mine = Fingerprint(own.Entries, opts.TZ); "" when own.Entries is nil.
//  3. Publish before reading: peers.Publish, then peers.LivePeers. This order
//     is what makes an edit race-free: of two hosts taking the same edit, the
//     second to publish sees the first's new fingerprint.
//  4. No registry (peers nil), an unreadable one, or no peers: proceed. Not
//     knowing whether anyone disagrees is not knowing that someone does.
//  5. Opinions are live peers (AgeKnown) with a non-empty fingerprint;
//     abstainers never disagree. A peer whose fingerprint is junk
//     (registry.InvalidFingerprint) is an opinion nobody matches.
//  6. mine "" with opinions: RefusedOwnUnreadable. Any opinion != mine:
//     RefusedDivergence. Both install and prune are withheld, because an upsert
//     of an existing id redefines it. Each is logged as cron_divergence_refused.
//  7. Otherwise cron_agreement {peers} (when there are opinions) and Reconcile.
//
// peers may be nil (no registry wired), but not a nil *registry.Registry in a
// non-nil interface.
//
// A refusal is a value, never an error: the worker logs it and keeps draining
// its queues. The error is the reconcile's own (a store failure).
//
// own and served must come from the same read of the file; the fingerprint
// covers own.Entries (authored: what hosts must agree about), while served is
// the subset this host installs (Served), which legitimately differs per host.
// Logged cronCount is the authored count, the same number peers publish.
func ReconcileGated(ctx context.Context, store SchedulerStore, peers Peers, own Own, served []Entry, opts Options) (GateResult, error) {
	if !own.Configured {
		return GateResult{Refused: RefusedCronDisabled}, nil
	}
	mine, err := Fingerprint(own.Entries, opts.TZ)
	if err != nil {
		return GateResult{}, err
	}
	gr := GateResult{Mine: mine}
	if hosts, known := livePeers(ctx, peers, opts); known {
		opinions, disagreeing := peerOpinions(hosts, mine, opts.Host)
		if gr.Refused, gr.Peers = refusal(mine, own, opinions, disagreeing, opts); gr.Refused != "" {
			return gr, nil
		}
		if len(opinions) > 0 {
			opts.logger().Info("cron_agreement", "host", opts.Host, "peers", len(opinions))
		}
	}
	gr.Result, err = Reconcile(ctx, store, served, opts)
	return gr, err
}

// livePeers publishes, then reads the live peers (the race-free order); known is false without a registry.
func livePeers(ctx context.Context, peers Peers, opts Options) (hosts []registry.Host, known bool) {
	if peers == nil {
		return nil, false
	}
	log := opts.logger()
	if err := peers.Publish(ctx); err != nil {
		// Peers may see an older fingerprint of ours; our decision below still
		// rests on theirs, and it only ever withholds.
		log.Warn("cron_gate_publish_failed", "host", opts.Host, "reason", err.Error())
	}
	hosts, err := peers.LivePeers(ctx)
	if err != nil {
		log.Warn("cron_gate_registry_unreadable", "host", opts.Host, "reason", err.Error())
		return nil, false
	}
	return hosts, true
}

// peerOpinions returns the peers that hold an opinion and those that disagree: abstainers never disagree.
func peerOpinions(hosts []registry.Host, mine, self string) (opinions, disagreeing []PeerView) {
	for _, h := range hosts {
		if !h.AgeKnown || h.FPCron == "" || h.Name == self {
			continue
		}
		v := PeerView{Host: h.Name, FPCron: h.FPCron, CronCount: h.CronCount}
		opinions = append(opinions, v)
		if h.FPCron != mine {
			disagreeing = append(disagreeing, v)
		}
	}
	return opinions, disagreeing
}

// refusal returns why the reconcile is withheld and the peers that decided it, logged, or "" and the opinions.
func refusal(mine string, own Own, opinions, disagreeing []PeerView, opts Options) (string, []PeerView) {
	count := len(own.Entries)
	if mine == "" && len(opinions) > 0 {
		attrs := []any{"host", opts.Host, "mine", mine, "reason", RefusedOwnUnreadable, "cronCount", count, "peers", opinions}
		if own.Err != nil {
			attrs = append(attrs, "error", own.Err.Error())
		}
		opts.logger().Warn("cron_divergence_refused", attrs...)
		return RefusedOwnUnreadable, opinions
	}
	if len(disagreeing) > 0 {
		opts.logger().Warn("cron_divergence_refused", "host", opts.Host, "mine", mine, "reason", RefusedDivergence,
			"cronCount", count, "peers", disagreeing)
		return RefusedDivergence, disagreeing
	}
	return "", opinions
}
