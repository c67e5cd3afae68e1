package forge

import (
	"slices"
	"strings"

	"github.com/pidispatch/pidispatch/cronsync"
)

// Reasons an event starts no job. Each is a fixed token, logged as reason.
const (
	// Refusals: the event came from somewhere or someone that may not spend.
	ReasonUnknownRepository = "unknown-repository"  // no trigger serves the repository
	ReasonSelf              = "self"                // the event is this service's own
	ReasonAuthorNotAllowed  = "author-not-allowed"  // the actor lacks write (triage for labels)
	ReasonLookupForbidden   = "permission-unknown"  // the forge would not say (403 to our token)
	ReasonBadSignature      = "bad-signature"       // receiver: signature or token wrong
	ReasonNoSignature       = "missing-signature"   // receiver: no signature or token
	ReasonReplayed          = "replayed"            // receiver: a delivery id seen before
	ReasonTooLarge          = "too-large"           // receiver: body over the limit
	ReasonMalformed         = "malformed"           // receiver: payload does not parse
	ReasonMissingDelivery   = "missing-delivery-id" // receiver: no or bad delivery id
	ReasonStale             = "stale"               // receiver: GitLab signature timestamp out of window
	// Drops: a good event no trigger wants.
	ReasonUnhandled        = "unhandled-event"
	ReasonNoLabel          = "no-allowlisted-label"
	ReasonNoPhrase         = "no-trigger-phrase"
	ReasonNoPRTrigger      = "no-matching-pr-trigger"
	ReasonReviewState      = "review-state-not-matched"
	ReasonNoCloseTrigger   = "no-matching-close-trigger"
	ReasonCloseNumber      = "close-number-not-matched"
	ReasonDisarmed         = "trigger-disarmed"
	ReasonNoTriggerForType = "no-trigger"
)

// Need is the permission an event's actor must hold for it to count.
type Need int

// Needs, weakest first.
const (
	NeedTriage Need = iota + 1 // may label issues (GitHub triage, GitLab Reporter)
	NeedWrite                  // may push (GitHub write, GitLab Developer, Forgejo write)
)

func (n Need) String() string {
	if n == NeedTriage {
		return "triage"
	}
	return "write"
}

// Match returns the first trigger, in file order, that the event fires, with
// the permission its actor needs; or no trigger and the reason none fired.
// Only triggers of the event's forge that serve its repository are read.
func Match(triggers []cronsync.ForgeTrigger, ev Event) (cronsync.ForgeTrigger, Need, string) {
	served := servedBy(triggers, ev)
	if len(served) == 0 {
		return cronsync.ForgeTrigger{}, 0, ReasonUnknownRepository
	}
	if ev.Kind == "" {
		return cronsync.ForgeTrigger{}, 0, ReasonUnhandled
	}
	// The reason of the first trigger of the event's kind that did not fire
	// is the one reported: the operator's closest rule.
	reason := ReasonNoTriggerForType
	for _, t := range served {
		need, r := fire(t, ev)
		if need != 0 {
			return t, need, ""
		}
		if r != "" && reason == ReasonNoTriggerForType {
			reason = r
		}
	}
	return cronsync.ForgeTrigger{}, 0, reason
}

// servedBy keeps the triggers of the event's forge that serve its repository: no other may fire.
func servedBy(triggers []cronsync.ForgeTrigger, ev Event) []cronsync.ForgeTrigger {
	var served []cronsync.ForgeTrigger
	for _, t := range triggers {
		if t.Forge == ev.Forge && slices.Contains(t.Repos, ev.Repo) {
			served = append(served, t)
		}
	}
	return served
}

// fire returns the need of a trigger the event fires, or the reason one of its kind did not ("" for another kind).
func fire(t cronsync.ForgeTrigger, ev Event) (Need, string) {
	switch {
	case ev.Kind == KindLabel && t.Type == cronsync.TypeLabel && !ev.PullRequest:
		if r := labelsMatch(t, ev); r != "" {
			return 0, r
		}
		return NeedTriage, ""
	case ev.Kind == KindComment && t.Type == cronsync.TypeComment:
		if !strings.Contains(ev.Comment, t.Phrase) {
			return 0, ReasonNoPhrase
		}
		return NeedWrite, ""
	case ev.Kind == KindPullRequest && t.Type == cronsync.TypePullRequest,
		ev.Kind == KindClose && ev.PullRequest && t.Type == cronsync.TypePullRequest:
		return firePullRequest(t, ev)
	case (ev.Kind == KindClose || ev.Kind == KindPullRequest && isCloseAction(ev.Action)) && t.Type == cronsync.TypeIssue:
		return fireClose(t, ev)
	}
	return 0, ""
}

// firePullRequest matches action, review state and labels; a label action needs triage only, as on an issue.
func firePullRequest(t cronsync.ForgeTrigger, ev Event) (Need, string) {
	if !slices.Contains(t.Actions, ev.Action) {
		return 0, ReasonNoPRTrigger
	}
	if t.ReviewState != "" && t.ReviewState != ev.ReviewState {
		return 0, ReasonReviewState
	}
	need := NeedWrite
	if len(t.Any) > 0 || len(t.All) > 0 || len(t.None) > 0 {
		on := ev
		if !isLabelAction(ev.Action) {
			on.Added = ev.Labels // not a label event: the labels it carries
		}
		if r := labelsMatch(t, on); r != "" {
			return 0, r
		}
		if isLabelAction(ev.Action) {
			need = NeedTriage
		}
	}
	return need, ""
}

// fireClose matches an issue (close) trigger's action and number; a disarmed one-shot fires no more.
func fireClose(t cronsync.ForgeTrigger, ev Event) (Need, string) {
	if !slices.Contains(t.Actions, ev.Action) {
		return 0, ReasonNoCloseTrigger
	}
	if t.Number != 0 && t.Number != ev.Number {
		return 0, ReasonCloseNumber
	}
	if t.Disarmed {
		return 0, ReasonDisarmed
	}
	return NeedWrite, ""
}

// isCloseAction: a pull request closed (merged included) also fires issue
// (close) triggers.
func isCloseAction(a string) bool { return a == "closed" || a == "close" }

func isLabelAction(a string) bool { return a == "labeled" || a == "label_updated" }

// labelsMatch applies any/all/none: one of Any among the labels the event
// added (so an unrelated label never re-fires a rule), every one of All and
// none of None among the labels then on the issue.
func labelsMatch(t cronsync.ForgeTrigger, ev Event) string {
	if len(t.Any) > 0 && !slices.ContainsFunc(ev.Added, func(l string) bool { return slices.Contains(t.Any, l) }) {
		return ReasonNoLabel
	}
	if len(t.Any) == 0 && len(t.All) > 0 && !slices.ContainsFunc(ev.Added, func(l string) bool { return slices.Contains(t.All, l) }) {
		return ReasonNoLabel // the event must add one of the labels it is about
	}
	for _, l := range t.All {
		if !slices.Contains(ev.Labels, l) {
			return ReasonNoLabel
		}
	}
	for _, l := range t.None {
		if slices.Contains(ev.Labels, l) {
			return ReasonNoLabel
		}
	}
	return ""
}
