package fleetstate

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// Every Valkey key this package touches is formatted here and nowhere else, so a
// later change of layout (a hash tag for Valkey Cluster) is one file.
//
// The spend-cap windows are the one split: their date is the Valkey server's,
// read by the reserve script itself, so the script appends the date suffix to a
// prefix formatted here. The suffix formats are defined here too (budgetDayLayout
// and the Monday rule of budgetMonday) and the Lua in scripts.go must produce the
// same text; a test holds the two together. The full key shapes are:
//
//	budget:<YYYY-MM-DD>                 global count of the UTC day
//	budget:w:<monday YYYY-MM-DD>        global count of the ISO week (its Monday, UTC)
//	budget:m:<YYYY-MM>                  global count of the UTC month
//	budget:s:<hash16>:<YYYY-MM-DD>      one scope's count of the UTC day
//	budget:s:<hash16>:w:<monday>        one scope's count of the ISO week
//	budget:s:<hash16>:m:<YYYY-MM>       one scope's count of the UTC month
//	budget:rel:<token>                  a reservation's release guard (released once)
//	budget:usd:<YYYY-MM-DD>             settled micro-dollars of the UTC day (also :w:<monday>, :m:<YYYY-MM>)
//	budget:usd:s:<hash16>:<YYYY-MM-DD>  one scope's settled micro-dollars (also :w:<monday>, :m:<YYYY-MM>)
//	<dollar window>:res                 ZSET: the window's live reservations, member -> expiry ms
//	<dollar window>:amt                 HASH: the window's live reservations, member -> micro-dollars
//	budget:usd:settle:<token>           a dollar reservation's settle guard (settled once)
//	runs:rec:<queue>+<stem>.attempt-<n> one attempt's mirrored run record (stem = SanitizeJobID)
//	runs:claim:<stem>.attempt-<n>       the host that records that attempt (one fleet-wide)
//	runs:index                          ZSET of those members (<stem>.attempt-<n>) scored by endedAt ms
//	cancel:req:<jobId>, cancel:ack:<jobId>  operator cancel of a running job
//	pi:paused                           the fleet-wide pause flag
//	wait:job:<jobId>                    HASH: a held job's hold state (wait-for)
//	wait:key:<dedupId>                  STRING: the job id holding a dedup id's wait
//	wait:held                           SET: ids of held jobs; readers prune the gone
//	ratelimit:<provider>                STRING "<until ms> <why>", PX to the reset
//	ratelimit:providers                 SET: providers that were suspended; readers prune the gone
//	runs:live:<stem>                    STREAM: a running job's redacted transcript entries, capped, with a TTL
//	thread:{<hash16>}:line              ZSET: a forge thread's waiting and running job ids, scored by enqueue ms
//	thread:{<hash16>}:seen              HASH: job id -> when it last asked for its turn (server ms)
//	thread:{<hash16>}:holder            STRING: the job id that holds the thread, PX its ttl
//	session:{<hash16>}                  STRING: a thread's last agent session, signed and compressed, PX the record retention
//	pr:outcome:<sha256/32>              HASH: a pull request's outcome (o) and its fleet signature (s), EX 90 days
const (
	budgetDayPrefix     = "budget:"
	budgetWeekPrefix    = "budget:w:"
	budgetMonthPrefix   = "budget:m:"
	budgetScopePrefix   = "budget:s:"
	budgetReleasePrefix = "budget:rel:"
	dollarPrefix        = "budget:usd:"
	dollarWeekPrefix    = "budget:usd:w:"
	dollarMonthPrefix   = "budget:usd:m:"
	dollarScopePrefix   = "budget:usd:s:"
	dollarSettlePrefix  = "budget:usd:settle:"
	// The two keys of a dollar window's live reservations are the window's
	// key with these suffixes; the reserve script appends them to the key it
	// builds.
	dollarResSuffix     = ":res"
	dollarAmtSuffix     = ":amt"
	runRecordPrefix     = "runs:rec:"
	runClaimPrefix      = "runs:claim:"
	cancelRequestPrefix = "cancel:req:"
	cancelAckPrefix     = "cancel:ack:"
	waitJobPrefix       = "wait:job:"
	waitDedupPrefix     = "wait:key:"
	rateLimitPrefix     = "ratelimit:"
	runLivePrefix       = "runs:live:"
	threadPrefix        = "thread:"
	sessionPrefix       = "session:"
	pullOutcomePrefix   = "pr:outcome:"

	// budgetDayLayout is the date suffix of every day and week window key,
	// budgetMonthLayout that of every month window key.
	budgetDayLayout   = "2006-01-02"
	budgetMonthLayout = "2006-01"
)

// RunIndexKey is the run mirror's index: a ZSET of record stems scored by their
// endedAt in milliseconds, trimmed by age and by count on every write.
const RunIndexKey = "runs:index"

// PausedKey is the fleet-wide pause flag: set, every queue of the fleet is
// paused, including a host queue created after the pause.
const PausedKey = "pi:paused"

// BudgetDayKey is the global spend-cap counter of t's UTC day.
func BudgetDayKey(t time.Time) string { return budgetDayPrefix + budgetDay(t) }

// BudgetWeekKey is the global spend-cap counter of t's ISO week, named by its
// Monday (UTC).
func BudgetWeekKey(t time.Time) string { return budgetWeekPrefix + budgetMonday(t) }

// BudgetMonthKey is the global spend-cap counter of t's UTC month.
func BudgetMonthKey(t time.Time) string { return budgetMonthPrefix + budgetMonth(t) }

// BudgetScopeDayKey is scope's own counter of t's UTC day. The scope (a folder or
// owner/name, which may hold ':' and '/') is hashed rather than used as a key
// segment, with the same hash as the scope's fleet slots (fleet.ScopeHash).
func BudgetScopeDayKey(scope string, t time.Time) string {
	return budgetScopeDayPrefix(scope) + budgetDay(t)
}

// BudgetScopeWeekKey is scope's own counter of t's ISO week.
func BudgetScopeWeekKey(scope string, t time.Time) string {
	return budgetScopeWeekPrefix(scope) + budgetMonday(t)
}

// BudgetScopeMonthKey is scope's own counter of t's UTC month.
func BudgetScopeMonthKey(scope string, t time.Time) string {
	return budgetScopeMonthPrefix(scope) + budgetMonth(t)
}

// budgetScopeDayPrefix, budgetScopeWeekPrefix and budgetScopeMonthPrefix are the
// scope keys without their date, for the reserve script.
func budgetScopeDayPrefix(scope string) string {
	return budgetScopePrefix + fleet.ScopeHash(scope) + ":"
}

func budgetScopeWeekPrefix(scope string) string {
	return budgetScopePrefix + fleet.ScopeHash(scope) + ":w:"
}

func budgetScopeMonthPrefix(scope string) string {
	return budgetScopePrefix + fleet.ScopeHash(scope) + ":m:"
}

// budgetReleaseKey guards one reservation's release, so a retried release (by a
// caller or by the client after a timeout) never gives a slot back twice.
func budgetReleaseKey(token string) string { return budgetReleasePrefix + token }

// budgetDay is t's UTC date, the day suffix of a budget key.
func budgetDay(t time.Time) string { return t.UTC().Format(budgetDayLayout) }

// budgetMonth is t's UTC year and month, the month suffix of a budget key.
func budgetMonth(t time.Time) string { return t.UTC().Format(budgetMonthLayout) }

// budgetMonday is the UTC date of the Monday that starts t's ISO week, the week
// suffix of a budget key.
func budgetMonday(t time.Time) string {
	u := t.UTC()
	back := (int(u.Weekday()) + 6) % 7 // Monday 0 ... Sunday 6
	y, m, d := u.Date()
	return time.Date(y, m, d-back, 0, 0, 0, 0, time.UTC).Format(budgetDayLayout)
}

// RunRecordKey is the mirrored body of the run record of one attempt of a job.
// It is the record file's name without .json (RecordName), so the mirror and
// the file name one attempt alike.
func RunRecordKey(queue, jobID string, attempt int) string {
	return runRecordPrefix + jobs.RecordMember(queue, jobID, attempt)
}

// RunClaimKey names the host that writes the record of one attempt of a job:
// the first to claim it. Two hosts that both saw the attempt end (a frozen
// worker waking after another host's stalled check failed its job) write one
// record between them.
func RunClaimKey(queue, jobID string, attempt int) string {
	return runClaimPrefix + jobs.RecordMember(queue, jobID, attempt)
}

// CancelRequestKey is an operator's request to stop a running job.
func CancelRequestKey(jobID string) string { return cancelRequestPrefix + jobID }

// CancelAckKey is the worker's acknowledgement that it stopped a job on request.
func CancelAckKey(jobID string) string { return cancelAckPrefix + jobID }

// WaitHeldKey is the SET of the ids of held jobs (jobs waiting on their waitFor
// conditions). A SET cannot expire its members, so its readers (HeldCount) prune
// ids whose hold state (WaitJobKey) is gone.
const WaitHeldKey = "wait:held"

// WaitJobKey is a held job's hold state: a HASH any host reads to continue the
// hold where the last check left it.
func WaitJobKey(jobID string) string { return waitJobPrefix + jobID }

// WaitDedupKey names the job that holds the wait of a dedup id: a newer delivery
// of the same intent takes it over and ends the older hold.
func WaitDedupKey(dedupID string) string { return waitDedupPrefix + dedupID }

// RateLimitProvidersKey is the SET of providers with a rate-limit suspension.
// A SET cannot expire its members, so its readers (RateLimits.List) prune
// names whose suspension (RateLimitKey) is gone.
const RateLimitProvidersKey = "ratelimit:providers"

// RateLimitKey is one provider's rate-limit suspension: the reset time in
// epoch milliseconds and the reason, expiring at the reset. The provider name
// is validated before it names a key.
func RateLimitKey(provider string) string { return rateLimitPrefix + provider }

// DollarDayKey is the global dollar window of t's UTC day: its settled spend
// in micro-dollars.
func DollarDayKey(t time.Time) string { return dollarPrefix + budgetDay(t) }

// DollarWeekKey is the global dollar window of t's ISO week (its Monday, UTC).
func DollarWeekKey(t time.Time) string { return dollarWeekPrefix + budgetMonday(t) }

// DollarMonthKey is the global dollar window of t's UTC month.
func DollarMonthKey(t time.Time) string { return dollarMonthPrefix + budgetMonth(t) }

// DollarScopeDayKey is scope's own dollar window of t's UTC day (the scope
// hashed as in BudgetScopeDayKey).
func DollarScopeDayKey(scope string, t time.Time) string {
	return dollarScopeDayPrefix(scope) + budgetDay(t)
}

// DollarScopeWeekKey is scope's own dollar window of t's ISO week.
func DollarScopeWeekKey(scope string, t time.Time) string {
	return dollarScopeWeekPrefix(scope) + budgetMonday(t)
}

// DollarScopeMonthKey is scope's own dollar window of t's UTC month.
func DollarScopeMonthKey(scope string, t time.Time) string {
	return dollarScopeMonthPrefix(scope) + budgetMonth(t)
}

func dollarScopeDayPrefix(scope string) string {
	return dollarScopePrefix + fleet.ScopeHash(scope) + ":"
}

func dollarScopeWeekPrefix(scope string) string {
	return dollarScopePrefix + fleet.ScopeHash(scope) + ":w:"
}

func dollarScopeMonthPrefix(scope string) string {
	return dollarScopePrefix + fleet.ScopeHash(scope) + ":m:"
}

// DollarReservationsKey is the ZSET of a dollar window's live reservations,
// each scored by its expiry in epoch milliseconds. window is one of the
// Dollar...Key keys.
func DollarReservationsKey(window string) string { return window + dollarResSuffix }

// DollarAmountsKey is the HASH of a dollar window's live reservations'
// micro-dollars, by member.
func DollarAmountsKey(window string) string { return window + dollarAmtSuffix }

// dollarSettleKey guards one dollar reservation's settle, so a retried settle
// never counts the spend twice.
func dollarSettleKey(token string) string { return dollarSettlePrefix + token }

// RunLiveKey is the live transcript of a job: a STREAM of its running
// attempts' redacted transcript entries, capped in length (XADD MAXLEN ~) and
// expiring a while after the last one, so `pi-dispatch logs --follow` on any
// host can read what the job prints where it runs.
func RunLiveKey(jobID string) string { return runLivePrefix + jobs.SanitizeJobID(jobID) }

// A forge thread's keys (an issue or a pull request, jobs.Job.Thread) carry
// the thread's digest as a hash tag, {<hash16>}, so a Valkey Cluster keeps
// the three in one slot and the turn script may touch them together. The
// thread itself ("<forge>:<owner>/<name>#<n>") holds ':', '/' and '#', so it
// is hashed as a scope is (fleet.ScopeHash) rather than used as a segment.
func threadKeyPrefix(thread string) string {
	return threadPrefix + "{" + fleet.ScopeHash(thread) + "}:"
}

// ThreadLineKey is the ZSET of thread's line: the ids of its jobs that asked
// for a turn and are not done, scored by their enqueue time in milliseconds
// (ties ordered by id).
func ThreadLineKey(thread string) string { return threadKeyPrefix(thread) + "line" }

// ThreadSeenKey is the HASH of when each job of thread's line last asked for
// its turn, in milliseconds of the server's clock: a job that stops asking
// (its queue lost it) is dropped from the line.
func ThreadSeenKey(thread string) string { return threadKeyPrefix(thread) + "seen" }

// ThreadHolderKey is the id of the job that holds thread (runs now), expiring
// at the holder's ttl so a crashed holder does not keep the thread.
func ThreadHolderKey(thread string) string { return threadKeyPrefix(thread) + "holder" }

// SessionKey is the fleet's copy of thread's last agent session
// (dispatch.SessionStore), named by the digest of the thread that names
// the session's folder on each host (fleet.ScopeHash), as a hash tag.
func SessionKey(thread string) string { return sessionPrefix + "{" + fleet.ScopeHash(thread) + "}" }

// PullRequestOutcomeKey is the outcome of the pull request at url, named by
// a digest of the URL (a URL holds ':' and '/', and may be long); the value
// names the URL too, and a reader checks it.
func PullRequestOutcomeKey(url string) string {
	sum := sha256.Sum256([]byte(url))
	return pullOutcomePrefix + hex.EncodeToString(sum[:16])
}
