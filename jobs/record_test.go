package jobs_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/jobs"
)

func goodRecord() jobs.Record {
	code := 0
	return jobs.Record{
		JobID:     "local-00a5c2f57c689cf5",
		Kind:      jobs.KindLocal,
		Target:    "local:proj",
		Flow:      "review",
		StartedAt: time.Date(2026, 11, 30, 2, 11, 0, 123456789, time.UTC),
		EndedAt:   time.Date(2026, 11, 30, 3, 19, 30, 0, time.FixedZone("CET", 3600)),
		Outcome:   jobs.OutcomeCompleted,
		Reason:    jobs.ReasonCompleted,
		ExitCode:  &code,
		Attempt:   1,
		Host:      "mini1",
		Image:     "pi-job:latest",
		Telemetry: json.RawMessage(`{ "event": "exit", "turns": 12, "tokens": {"total": 4096}, "cost": 0.42 }`),
	}
}

func TestWriteRecord(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "logs", "nested") // created on demand
	r := goodRecord()
	p, err := jobs.WriteRecord(dir, r)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "local-00a5c2f57c689cf5.attempt-1.json"), p)

	info, err := os.Stat(p)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), info.Mode().Perm())

	data, err := os.ReadFile(p)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(string(data), "}\n"))
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(data, &fields))
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	require.Equal(t, []string{"attempt", "endedAt", "exitCode", "flow", "host", "image", "jobId", "kind", "outcome", "reason", "startedAt", "target", "telemetry"}, keys)
	require.JSONEq(t, `"2026-11-30T02:11:00.123Z"`, string(fields["startedAt"]), "UTC, milliseconds")
	require.JSONEq(t, `"2026-11-30T02:19:30Z"`, string(fields["endedAt"]))
	require.Equal(t, `{"event":"exit","turns":12,"tokens":{"total":4096},"cost":0.42}`, string(fields["telemetry"]), "compacted")

	var back jobs.Record
	require.NoError(t, json.Unmarshal(data, &back))
	require.Equal(t, r.JobID, back.JobID)
	require.Equal(t, 0, *back.ExitCode)
	require.True(t, back.EndedAt.Equal(r.EndedAt))

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temp file left behind")

	// Rewriting replaces the record whole.
	r.Outcome, r.Reason, r.ExitCode, r.Telemetry = jobs.OutcomeFailed, jobs.ReasonNeverStarted, nil, nil
	_, err = jobs.WriteRecord(dir, r)
	require.NoError(t, err)
	data, err = os.ReadFile(p)
	require.NoError(t, err)
	require.Contains(t, string(data), `"exitCode":null`)
	require.Contains(t, string(data), `"reason":"never-started"`)
	require.NotContains(t, string(data), "telemetry")
}

func TestWriteRecord_SanitizesTheFileName(t *testing.T) {
	t.Parallel()
	digest := func(id string) string {
		sum := sha256.Sum256([]byte(id))
		return "~" + hex.EncodeToString(sum[:8])
	}
	tests := []struct{ id, stem string }{
		{"gh-7c1e-r2", "gh-7c1e-r2"}, // a plain id is its own stem
		{strings.Repeat("x", 200), strings.Repeat("x", 200)},
		{"repeat:nightly:1700000000000", "repeat-nightly-1700000000000" + digest("repeat:nightly:1700000000000")},
		{"../../etc/passwd", "-.-..-etc-passwd" + digest("../../etc/passwd")},
		{".hidden", "-hidden" + digest(".hidden")},
		{"a b\\c", "a-b-c" + digest("a b\\c")},
		{strings.Repeat("x", 201), strings.Repeat("x", 160) + digest(strings.Repeat("x", 201))},
		{"é/ü", "-----" + digest("é/ü")},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		r := goodRecord()
		r.JobID = tt.id
		p, err := jobs.WriteRecord(dir, r)
		require.NoError(t, err, tt.id)
		require.Equal(t, filepath.Join(dir, tt.stem+".attempt-1.json"), p)
		require.Equal(t, dir, filepath.Dir(p), "the record stays in dir")
		require.Equal(t, tt.stem, jobs.SanitizeJobID(tt.id))
		got, err := jobs.ReadRecords(dir, tt.id)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, tt.id, got[0].JobID, "the real id is kept inside the record")
	}
}

// Ids that the old mapping (each byte outside [A-Za-z0-9._-] as '-', cut at
// 200 bytes) sent to one file get one file each.
func TestWriteRecord_NamesNeverCollide(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("p", 200)
	groups := [][]string{
		{"X:coll:1", "X-coll-1", "X@coll#1", "X/coll/1"},
		{long + "a", long + "b", long},
		{".x", "-x"},
	}
	for _, ids := range groups {
		dir := t.TempDir()
		for _, id := range ids {
			r := goodRecord()
			r.JobID = id
			_, err := jobs.WriteRecord(dir, r)
			require.NoError(t, err, id)
		}
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, len(ids), "one file per id: %q", ids)
		for _, id := range ids {
			got, err := jobs.ReadRecords(dir, id)
			require.NoError(t, err)
			require.Len(t, got, 1, id)
			require.Equal(t, id, got[0].JobID)
		}
	}
}

// A retry is a record of its own; the same attempt written twice is one.
func TestWriteRecord_OneRecordPerAttempt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := goodRecord()
	first.Outcome, first.Reason, first.Telemetry = jobs.OutcomeFailed, jobs.ReasonExit1, json.RawMessage(`{"event":"exit","cost":0.5}`)
	_, err := jobs.WriteRecord(dir, first)
	require.NoError(t, err)
	second := goodRecord()
	second.Attempt = 2
	_, err = jobs.WriteRecord(dir, second)
	require.NoError(t, err)
	_, err = jobs.WriteRecord(dir, second) // again: still one record of attempt 2
	require.NoError(t, err)
	// A job whose id ends like an attempt suffix is another job.
	other := goodRecord()
	other.JobID = first.JobID + ".attempt-1"
	_, err = jobs.WriteRecord(dir, other)
	require.NoError(t, err)

	got, err := jobs.ReadRecords(dir, first.JobID)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, 1, got[0].Attempt)
	require.Equal(t, jobs.ReasonExit1, got[0].Reason, "the retry kept the first attempt's record")
	require.JSONEq(t, `{"event":"exit","cost":0.5}`, string(got[0].Telemetry))
	require.Equal(t, 2, got[1].Attempt)
	require.Equal(t, jobs.ReasonCompleted, got[1].Reason)
	got, err = jobs.ReadRecords(dir, other.JobID)
	require.NoError(t, err)
	require.Len(t, got, 1)
}

// A crash between a record's fsync and its rename leaves a whole temp file:
// boot renames it into place. A cut-short or superseded one is removed.
func TestRecoverRecordTemps(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := goodRecord()
	p, err := jobs.WriteRecord(dir, r)
	require.NoError(t, err)
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	// A whole record never renamed: its final file is missing.
	whole := goodRecord()
	whole.Attempt = 2
	wholeName := jobs.RecordName(whole.Queue, whole.JobID, 2)
	wholeData := strings.Replace(string(data), `"attempt":1`, `"attempt":2`, 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "."+wholeName+".tmp-123"), []byte(wholeData), 0o640))
	// A cut-short write, and a temp file of a record already in place.
	cut := filepath.Join(dir, "."+jobs.RecordName("", "cut", 1)+".tmp-456")
	require.NoError(t, os.WriteFile(cut, data[:20], 0o640))
	stale := filepath.Join(dir, "."+filepath.Base(p)+".tmp-789")
	require.NoError(t, os.WriteFile(stale, []byte(strings.Replace(string(data), "mini1", "other", 1)), 0o640))
	unrelated := filepath.Join(dir, ".notes")
	require.NoError(t, os.WriteFile(unrelated, []byte("x"), 0o640))

	// A temp file as young as a write in progress is left alone.
	completed, removed, err := jobs.RecoverRecordTemps(dir, time.Now().Add(-time.Minute))
	require.NoError(t, err)
	require.Zero(t, completed+removed)
	require.FileExists(t, cut)

	completed, removed, err = jobs.RecoverRecordTemps(dir, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, 1, completed)
	require.Equal(t, 2, removed)
	got, err := jobs.ReadRecords(dir, r.JobID)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "mini1", got[0].Host, "the record in place is kept")
	require.NoFileExists(t, cut)
	require.NoFileExists(t, stale)
	require.FileExists(t, unrelated)
}

func TestRefusedJobID(t *testing.T) {
	t.Parallel()
	id, quoted := jobs.RefusedJobID("gh-1")
	require.Equal(t, "gh-1", id)
	require.Empty(t, quoted)
	for _, bad := range []string{"a\nb", strings.Repeat("y", 300), "\xff\xfe", strings.Repeat("\x01", 2000)} {
		id, quoted := jobs.RefusedJobID(bad)
		require.True(t, strings.HasPrefix(id, "refused-id~"), id)
		require.NotEmpty(t, quoted)
		r := goodRecord()
		r.JobID, r.JobIDQuoted = id, quoted
		require.NoError(t, r.Validate(), "%q", bad)
		other, _ := jobs.RefusedJobID(bad + "z")
		require.NotEqual(t, id, other)
	}
}

func TestRecord_Validate(t *testing.T) {
	t.Parallel()
	require.NoError(t, goodRecord().Validate())
	mutate := func(f func(*jobs.Record)) jobs.Record {
		r := goodRecord()
		f(&r)
		return r
	}
	tests := []struct {
		name  string
		give  jobs.Record
		field string
	}{
		{"NoJobID", mutate(func(r *jobs.Record) { r.JobID = "" }), "jobId"},
		{"ControlInJobID", mutate(func(r *jobs.Record) { r.JobID = "a\nb" }), "jobId"},
		{"UnknownOutcome", mutate(func(r *jobs.Record) { r.Outcome = "ok" }), "outcome"},
		{"UnknownReason", mutate(func(r *jobs.Record) { r.Outcome, r.Reason = jobs.OutcomeFailed, "exploded: secret=abc" }), "reason"},
		{"CompletedWithFailureReason", mutate(func(r *jobs.Record) { r.Reason = jobs.ReasonExit1 }), "reason"},
		{"FailedWithCompletedReason", mutate(func(r *jobs.Record) { r.Outcome = jobs.OutcomeFailed }), "reason"},
		{"UnknownKind", mutate(func(r *jobs.Record) { r.Kind = "github" }), "kind"},
		{"NoStart", mutate(func(r *jobs.Record) { r.StartedAt = time.Time{} }), "startedAt"},
		{"NoEnd", mutate(func(r *jobs.Record) { r.EndedAt = time.Time{} }), "endedAt"},
		{"EndBeforeStart", mutate(func(r *jobs.Record) { r.EndedAt = r.StartedAt.Add(-time.Second) }), "endedAt"},
		{"NegativeAttempt", mutate(func(r *jobs.Record) { r.Attempt = -1 }), "attempt"},
		{"NoHost", mutate(func(r *jobs.Record) { r.Host = "" }), "host"},
		{"BadHost", mutate(func(r *jobs.Record) { r.Host = "/home/rob" }), "host"},
		{"MultilineTarget", mutate(func(r *jobs.Record) { r.Target = "local:a\nb" }), "target"},
		{"TelemetryArray", mutate(func(r *jobs.Record) { r.Telemetry = json.RawMessage(`[1]`) }), "telemetry"},
		{"TelemetryInvalid", mutate(func(r *jobs.Record) { r.Telemetry = json.RawMessage(`{"a":`) }), "telemetry"},
		{"TelemetryHuge", mutate(func(r *jobs.Record) {
			r.Telemetry = json.RawMessage(`{"a":"` + strings.Repeat("x", jobs.MaxTelemetryBytes) + `"}`)
		}), "telemetry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.give.Validate()
			var fe *jobs.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.field, fe.Field)
			require.NotContains(t, err.Error(), "secret=abc", "a refused reason is not echoed whole")

			dir := t.TempDir()
			_, err = jobs.WriteRecord(dir, tt.give)
			require.ErrorAs(t, err, &fe)
			entries, rerr := os.ReadDir(dir)
			require.NoError(t, rerr)
			require.Empty(t, entries, "nothing written for an invalid record")
		})
	}
}

func TestReasons(t *testing.T) {
	t.Parallel()
	want := []jobs.Reason{"completed", "exit-1", "policy", "stalled", "timeout", "secret-profile-unknown",
		"secret-resolve-failed", "wait-profile-unknown", "scope-cap", "over-budget", "job-image-missing",
		"never-started", "operator-cancel", "wait-timeout", "wait-max-checks", "wait-faults", "wait-superseded", "invalid-job",
		"exit-other", "worker-shutdown", "cron-not-agreed", "cost-cap", "token-cap", "dollar-cap", "soft-hold",
		"folder-not-allowed", "image-not-allowed", "budget-corrupt", "job-unsigned",
		"protected-branch", "history-rewritten", "ci-change", "too-many-files", "too-large", "unsafe-path",
		"repo-gone", "forge-auth", "forge-unavailable", "no-forge", "forge-rejected", "forge-not-agreed"}
	require.ElementsMatch(t, want, jobs.Reasons)
	for _, reason := range jobs.Reasons {
		r := goodRecord()
		r.Reason = reason
		if reason != jobs.ReasonCompleted {
			r.Outcome = jobs.OutcomePolicy
		}
		require.NoError(t, r.Validate(), reason)
	}
}

func TestPruneRecords(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cutoff := now.Add(-30 * 24 * time.Hour)
	old := cutoff.Add(-time.Hour)
	recent := cutoff.Add(time.Hour)

	write := func(name, content string, mtime time.Time) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o640))
		require.NoError(t, os.Chtimes(p, mtime, mtime))
		return p
	}
	rec := func(endedAt time.Time) string {
		return `{"jobId":"x","endedAt":"` + endedAt.Format(time.RFC3339Nano) + `"}`
	}
	oldByEnded := write("old-ended.json", rec(old), recent)       // endedAt wins over a fresh mtime
	recentByEnded := write("recent-ended.json", rec(recent), old) // and over a stale one
	oldGarbage := write("garbage-old.json", "not json", old)      // no endedAt: mtime decides
	recentGarbage := write("garbage-new.json", `{"endedAt":""}`, recent)
	oldLog := write("old.log", "raw output", old)                       // never a .log
	hidden := write(".hidden.json", rec(old), old)                      // never a hidden file
	temp := write(".x.json.tmp-123", rec(old), old)                     // never a temp file
	require.NoError(t, os.Mkdir(filepath.Join(dir, "dir.json"), 0o750)) // never a directory
	target := write("target.txt", rec(old), old)
	require.NoError(t, os.Symlink(target, filepath.Join(dir, "link.json"))) // never a symlink

	n, err := jobs.PruneRecords(dir, cutoff)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for _, gone := range []string{oldByEnded, oldGarbage} {
		require.NoFileExists(t, gone)
	}
	for _, kept := range []string{recentByEnded, recentGarbage, oldLog, hidden, temp, target, filepath.Join(dir, "link.json")} {
		_, err := os.Lstat(kept)
		require.NoError(t, err, kept)
	}
	require.DirExists(t, filepath.Join(dir, "dir.json"))

	// A record written by WriteRecord is pruned by its own endedAt.
	r := goodRecord()
	r.StartedAt, r.EndedAt = old.Add(-time.Minute), old
	p, err := jobs.WriteRecord(dir, r)
	require.NoError(t, err)
	n, err = jobs.PruneRecords(dir, cutoff)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoFileExists(t, p)

	n, err = jobs.PruneRecords(filepath.Join(dir, "absent"), cutoff)
	require.NoError(t, err)
	require.Zero(t, n)
}

// The same job id on two queues keeps two records; a record of the older
// name form is still read; a file whose content names another queue is
// refused.
func TestRecordsNameTheirQueue(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b, old := goodRecord(), goodRecord(), goodRecord()
	a.Queue, b.Queue = "pi-jobs", "pi-jobs@web-1"
	b.Reason, b.Outcome = jobs.ReasonExit1, jobs.OutcomeFailed
	old.Attempt = 2
	for _, r := range []jobs.Record{a, b} {
		if _, err := jobs.WriteRecord(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	data, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, old.JobID+".attempt-2.json"), data, 0o640); err != nil {
		t.Fatal(err)
	}
	recs, err := jobs.ReadRecords(dir, a.JobID)
	if err != nil || len(recs) != 3 {
		t.Fatalf("records %+v, %v; want the two queues' and the older one", recs, err)
	}
	queues := map[string]jobs.Reason{}
	for _, r := range recs {
		queues[r.Queue] = r.Reason
	}
	if queues["pi-jobs"] != jobs.ReasonCompleted || queues["pi-jobs@web-1"] != jobs.ReasonExit1 || queues[""] != jobs.ReasonCompleted {
		t.Fatalf("records by queue %v", queues)
	}
	if got := jobs.RecordName("pi-jobs@web-1", "x:y", 3); got != "pi-jobs@web-1+x-y~"+got[len("pi-jobs@web-1+x-y~"):len("pi-jobs@web-1+x-y~")+16]+".attempt-3.json" {
		t.Fatalf("RecordName %s", got)
	}
	// A record stored under another queue's name is not that queue's record.
	forged := a
	forged.Queue = "pi-jobs@web-1"
	data, _ = json.Marshal(forged)
	if err := os.WriteFile(filepath.Join(dir, jobs.RecordName("pi-jobs", a.JobID, 5)), data, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.ReadRecords(dir, a.JobID); err == nil || !strings.Contains(err.Error(), "names another queue") {
		t.Fatalf("forged record: %v", err)
	}
	if (jobs.Record{Queue: "bad+queue"}).Validate() == nil || jobs.ValidQueueName("../x") || !jobs.ValidQueueName("pi-jobs@a.b_c-1") {
		t.Fatal("queue name rule")
	}
}

// The deferral reasons' wire values are pinned: logs, observers and metrics
// carry them as they are.
func TestDeferralReasons(t *testing.T) {
	t.Parallel()
	got := []jobs.Reason{jobs.ReasonPauseWindow, jobs.ReasonScopeBusy, jobs.ReasonBudgetUnreachable,
		jobs.ReasonDollarsUnreachable, jobs.ReasonDockerUnreachable, jobs.ReasonWaitAfter, jobs.ReasonWaitCheck,
		jobs.ReasonWaitThrottled, jobs.ReasonWaitStateLost, jobs.ReasonWaitStateUnavailable,
		jobs.ReasonWaitStateUnreachable, jobs.RateLimitedOn("anthropic"), jobs.ReasonThreadBusy, jobs.ReasonThreadUnreachable}
	want := []jobs.Reason{"pause-window", "scope-busy", "budget-unreachable", "dollars-unreachable",
		"docker-unreachable", "wait-after", "wait-check", "wait-throttled", "wait-state-lost",
		"wait-state-unavailable", "wait-state-unreachable", "rate-limited:anthropic", "thread-busy", "thread-unreachable"}
	require.Equal(t, want, got)
	for _, r := range got {
		require.NotContains(t, jobs.Reasons, r, "a deferral is never a record's reason")
	}
}

// A reason goes on the wire as its string: in JSON and as a Valkey argument.
func TestReasonWireForm(t *testing.T) {
	t.Parallel()
	b, err := jobs.ReasonExit1.MarshalBinary()
	require.NoError(t, err)
	require.Equal(t, []byte("exit-1"), b)
	j, err := json.Marshal(jobs.Record{Reason: jobs.ReasonExit1})
	require.NoError(t, err)
	require.Contains(t, string(j), `"reason":"exit-1"`)
}

func TestRecordForgeFields(t *testing.T) {
	t.Parallel()
	r := goodRecord()
	r.PullRequestURL = "https://forge.example/acme/web/pull/7"
	r.PushedCommit = strings.Repeat("a", 40)
	r.BaseCommit = strings.Repeat("0", 64)
	require.NoError(t, r.Validate())
	for name, mut := range map[string]func(*jobs.Record){
		"ShortCommit":   func(r *jobs.Record) { r.PushedCommit = "abc" },
		"UpperCommit":   func(r *jobs.Record) { r.BaseCommit = strings.Repeat("A", 40) },
		"NotURL":        func(r *jobs.Record) { r.PullRequestURL = "javascript:alert(1)" },
		"ControlInURL":  func(r *jobs.Record) { r.PullRequestURL = "https://x/\n" },
		"URLTooLong":    func(r *jobs.Record) { r.PullRequestURL = "https://x/" + strings.Repeat("a", 1024) },
		"StatusNotURL":  func(r *jobs.Record) { r.StatusCommentURL = "javascript:alert(1)" },
		"StatusControl": func(r *jobs.Record) { r.StatusCommentURL = "https://x/#\x1b" },
	} {
		bad := r
		mut(&bad)
		require.Error(t, bad.Validate(), name)
	}
}
