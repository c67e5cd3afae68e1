package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
)

// outcomeStore is the pull request outcome store the CLI joins, as the
// receiver fills it.
type outcomeStore map[string]jobs.PullRequestOutcome

func (s outcomeStore) Outcomes(_ context.Context, urls []string) (map[string]jobs.PullRequestOutcome, error) {
	out := map[string]jobs.PullRequestOutcome{}
	for _, u := range urls {
		if o, ok := s[u]; ok {
			out[u] = o
		}
	}
	return out, nil
}

var (
	monthRepos    = []string{"acme/web", "acme/api", "acme/docs", "beta/app", "gamma/lib"}
	monthTriggers = []string{"fix-issues", "review-prs", "nightly-deps", "answer-questions"}
	monthModels   = [][2]string{{"anthropic", "claude-sonnet-4"}, {"openai", "gpt-5"}, {"openrouter", "qwen3-coder"}}
	monthHosts    = []string{"alpha", "beta", "gamma"}
	monthFlows    = []string{"fix", "review", "answer"}
)

// monthOfRecords is 400 jobs over the last 29 days, a fifth of them retried
// once, and one job older than 30 days: spend split over one or two models,
// left unsplit (older records) or partly split, none at all (a run that
// never started); pull requests merged, closed, open or unknown to the
// store; predictions on half of them. Every amount is odd micro-dollars, so
// a sum off by one shows.
func monthOfRecords(now time.Time) ([]jobs.Record, outcomeStore) {
	rng := rand.New(rand.NewPCG(46, 2))
	store := outcomeStore{}
	var recs []jobs.Record
	for j := range 401 {
		ended := now.Add(-time.Hour - time.Duration(rng.Int64N(int64(28*24*time.Hour))))
		if j == 400 {
			ended = now.Add(-31 * 24 * time.Hour)
		}
		ended = ended.Truncate(time.Millisecond)
		base := jobs.Record{JobID: fmt.Sprintf("m-%04d", j), Kind: jobs.KindForge, Target: monthRepos[rng.IntN(5)],
			Flow: monthFlows[rng.IntN(3)], Host: monthHosts[rng.IntN(3)], Queue: "pi-jobs", Image: "pi-agent:1"}
		if j%23 != 0 { // a few manual runs no trigger made
			base.Trigger = monthTriggers[rng.IntN(4)]
		}
		attempts := 1
		if rng.IntN(5) == 0 {
			attempts = 2
		}
		for a := 1; a <= attempts; a++ {
			r := base
			r.Attempt = a
			r.EndedAt = ended.Add(time.Duration(a-attempts) * 10 * time.Minute)
			r.StartedAt = r.EndedAt.Add(-time.Duration(30+rng.IntN(1800)) * time.Second)
			r.Outcome, r.Reason = jobs.OutcomeCompleted, jobs.ReasonCompleted
			if a < attempts {
				r.Outcome, r.Reason = jobs.OutcomeFailed, jobs.ReasonExit1
			} else if rng.IntN(8) == 0 {
				r.Outcome, r.Reason = jobs.OutcomePolicy, jobs.ReasonPolicy
			}
			r.Telemetry = json.RawMessage(fmt.Sprintf(`{"event":"exit","turns":%d}`, 1+rng.IntN(40)))
			r.Spend = monthSpend(rng)
			if rng.IntN(2) == 0 {
				r.Predicted = &jobs.Prediction{ExpectedMicros: 2*rng.Int64N(1_000_000) + 1, P90Micros: 3_000_001, Basis: "trigger+flow", Runs: 12}
			}
			if r.Outcome == jobs.OutcomeCompleted && rng.IntN(5) < 3 {
				r.PullRequestURL = fmt.Sprintf("https://forge.example/%s/pull/%d", r.Target, j)
				switch rng.IntN(4) {
				case 0, 1:
					store[r.PullRequestURL] = jobs.PullRequestOutcome{State: jobs.PullRequestMerged, UpdatedAt: now}
				case 2:
					store[r.PullRequestURL] = jobs.PullRequestOutcome{State: jobs.PullRequestClosed, UpdatedAt: now}
				case 3:
					if rng.IntN(2) == 0 {
						store[r.PullRequestURL] = jobs.PullRequestOutcome{State: jobs.PullRequestOpen, UpdatedAt: now}
					}
				}
			}
			recs = append(recs, r)
		}
	}
	return recs, store
}

func monthSpend(rng *rand.Rand) *jobs.Spend {
	kind := rng.IntN(10)
	if kind == 0 {
		return nil // never started
	}
	s := &jobs.Spend{Basis: jobs.BasisMetered}
	models := 1 + rng.IntN(2)
	for i, m := range rng.Perm(3)[:models] {
		ms := jobs.ModelSpend{Provider: monthModels[m][0], Model: monthModels[m][1], Calls: 1 + i,
			Micros: 2*rng.Int64N(900_000) + 1, Tokens: jobs.SpendTokens{Input: 100 + rng.Int64N(50_000), Output: rng.Int64N(5000)}}
		s.Models = append(s.Models, ms)
		s.Micros += ms.Micros
		s.Calls += ms.Calls
		s.Tokens.Input += ms.Tokens.Input
		s.Tokens.Output += ms.Tokens.Output
	}
	switch kind {
	case 1: // written before the split existed
		s.Models = nil
	case 2: // a call the split does not name
		s.Micros += 2*rng.Int64N(50_000) + 1
	}
	s.Dollars = jobs.USD(s.Micros)
	return s
}

// want is one row as the test sums it, apart from operator.Breakdown.
type want struct {
	runs                          map[string]int64 // micros by run
	attempts                      int
	micros, tokens, turns, wallMs int64
	prs, merged, closed           map[string]bool
	predRecords                   int
	predMicros, actualMicros      int64
}

func newWant() *want {
	return &want{runs: map[string]int64{}, prs: map[string]bool{}, merged: map[string]bool{}, closed: map[string]bool{}}
}

// add counts a record's part: micros and tokens, and when whole its turns,
// wall time and pull request. By model, a record's spend is split between
// its models and only a record without a split counts whole.
func (w *want) add(r jobs.Record, micros, tokens int64, whole bool, store outcomeStore) {
	id := r.Queue + "/" + r.JobID
	w.attempts++
	w.micros += micros
	w.tokens += tokens
	w.runs[id] += micros
	if r.Predicted != nil {
		w.predRecords++
		w.predMicros += r.Predicted.ExpectedMicros
		if r.Spend != nil {
			w.actualMicros += r.Spend.Micros
		}
	}
	if !whole {
		return
	}
	var tel struct{ Turns int64 }
	_ = json.Unmarshal(r.Telemetry, &tel)
	w.turns += tel.Turns
	w.wallMs += r.EndedAt.Sub(r.StartedAt).Milliseconds()
	if r.PullRequestURL != "" {
		w.prs[id] = true
		switch store[r.PullRequestURL].State {
		case jobs.PullRequestMerged:
			w.merged[id] = true
		case jobs.PullRequestClosed:
			w.closed[id] = true
		}
	}
}

func (w *want) pct(p int) int64 {
	v := make([]int64, 0, len(w.runs))
	for _, m := range w.runs {
		v = append(v, m)
	}
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[(p*len(v)+99)/100-1]
}

func (w *want) perMerged() int64 {
	if len(w.merged) == 0 {
		return 0
	}
	return w.micros / int64(len(w.merged))
}

// expectBreakdown sums recs by `by`, and their total.
func expectBreakdown(recs []jobs.Record, by operator.BreakdownBy, store outcomeStore) (map[string]*want, *want) {
	rows, total := map[string]*want{}, newWant()
	get := func(k string) *want {
		if k == "" {
			k = "(none)"
		}
		if rows[k] == nil {
			rows[k] = newWant()
		}
		return rows[k]
	}
	for _, r := range recs {
		var micros, tokens int64
		if r.Spend != nil {
			micros, tokens = r.Spend.Micros, r.Spend.Tokens.Total()
		}
		total.add(r, micros, tokens, true, store)
		switch by {
		case operator.ByRepo:
			get(r.Target).add(r, micros, tokens, true, store)
		case operator.ByTrigger:
			get(r.Trigger).add(r, micros, tokens, true, store)
		case operator.ByFlow:
			get(r.Flow).add(r, micros, tokens, true, store)
		case operator.ByHost:
			get(r.Host).add(r, micros, tokens, true, store)
		case operator.ByOutcome:
			get(r.Outcome).add(r, micros, tokens, true, store)
		case operator.ByModel:
			if r.Spend == nil || len(r.Spend.Models) == 0 {
				get("").add(r, micros, tokens, true, store)
				continue
			}
			rest := micros
			for _, m := range r.Spend.Models {
				get(m.Provider+"/"+m.Model).add(r, m.Micros, m.Tokens.Total(), false, store)
				rest -= m.Micros
			}
			if rest > 0 {
				get("").add(r, rest, 0, false, store)
			}
		}
	}
	return rows, total
}

// A month of records across 5 repositories, 4 triggers and 3 models: every
// breakdown, in the table, JSON and CSV, matches sums the test makes itself,
// to the cent (the table) and to the micro-dollar (JSON, CSV); the run
// mirror alone, this host's records alone, and a mirror that missed some
// merged with the records give the same answer.
func TestRunsByMatchesAMonthOfRecords(t *testing.T) {
	full, partial := livetest.Valkey(t), livetest.Valkey(t)
	ctx := context.Background()
	now := time.Now().UTC()
	all, store := monthOfRecords(now)
	// The outcomes, where the receiver keeps them: the CLI reads them there.
	for _, db := range []*livetest.ValkeyDB{full, partial} {
		prs := fleetstate.NewPullRequests(db.Client)
		for url, o := range store {
			if err := prs.Record(ctx, url, o); err != nil {
				t.Fatal(err)
			}
		}
	}

	logs, empty := t.TempDir(), t.TempDir()
	mirrorFull := fleetstate.NewMirror(full.Client, fleetstate.MirrorConfig{})
	mirrorPartial := fleetstate.NewMirror(partial.Client, fleetstate.MirrorConfig{})
	for _, r := range all {
		if _, err := jobs.WriteRecord(logs, r); err != nil {
			t.Fatal(err)
		}
		if err := mirrorFull.Mirror(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	var inWindow []jobs.Record
	for _, r := range all {
		if r.EndedAt.After(now.Add(-30 * 24 * time.Hour)) {
			inWindow = append(inWindow, r)
		}
	}
	if len(inWindow) != len(all)-1 {
		t.Fatalf("%d of %d records in the window, want all but one", len(inWindow), len(all))
	}

	sources := []struct {
		name string
		env  map[string]string
		seed func() // before the source is read
	}{
		{"mirror", map[string]string{"VALKEY_URL": full.URL, "PI_LOGS_DIR": empty}, nil},
		// An empty database has no mirror: the logs dir is read alone.
		{"logs-dir", map[string]string{"VALKEY_URL": partial.URL, "PI_LOGS_DIR": logs}, nil},
		{"merged", map[string]string{"VALKEY_URL": partial.URL, "PI_LOGS_DIR": logs}, func() {
			// The mirror missed the newest ten (Valkey was down): the records fill them in.
			byEnd := slices.Clone(all)
			slices.SortFunc(byEnd, func(a, b jobs.Record) int { return a.EndedAt.Compare(b.EndedAt) })
			for _, r := range byEnd[:len(byEnd)-10] {
				if err := mirrorPartial.Mirror(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
	answers := map[string][]string{}
	for _, src := range sources {
		if src.seed != nil {
			src.seed()
		}
		for _, by := range operator.Groupings {
			rows, total := expectBreakdown(inWindow, by, store)
			if by == operator.ByRepo && len(rows) != 5 || by == operator.ByModel && len(rows) != 4 || by == operator.ByTrigger && len(rows) != 5 {
				t.Fatalf("%s: %d keys: the month does not cover what it should", by, len(rows))
			}
			label := src.name + " --by " + string(by)
			table := runCLI(t, src.env, "runs", "--by", string(by))
			js := runCLI(t, src.env, "runs", "--by", string(by), "--since", "30d", "--json")
			cs := runCLI(t, src.env, "runs", "--csv", "--by", string(by))
			for _, r := range []result{table, js, cs} {
				if r.code != exitOK || r.stderr != "" {
					t.Fatalf("%s: %+v", label, r)
				}
			}
			checkTable(t, label, table.stdout, by, rows, total)
			checkJSON(t, label, js.stdout, rows, total)
			checkCSV(t, label, cs.stdout, by, rows, total)
			tableRows, _, _ := strings.Cut(table.stdout, "\nruns that ended")
			answers[string(by)] = append(answers[string(by)], tableRows, cs.stdout, sumsOnly(t, js.stdout))
		}
		if src.name == "merged" {
			r := runCLI(t, src.env, "runs", "--by", "repo")
			if !strings.Contains(r.stdout, "10 run(s) only there, not mirrored") {
				t.Fatalf("merged source: %s", r.stdout)
			}
		}
	}
	for by, a := range answers {
		for i := 3; i < len(a); i++ {
			if a[i] != a[i%3] {
				t.Fatalf("--by %s: source %d answers\n%s\nnot as the mirror\n%s", by, i/3, a[i], a[i%3])
			}
		}
	}
}

// sumsOnly is a --json report without where it was read from.
func sumsOnly(t *testing.T, out string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"source", "degraded", "localOnly", "since"} {
		delete(m, k)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func decimal6(m int64) string { return fmt.Sprintf("%d.%06d", m/1_000_000, m%1_000_000) }

// toCents rounds to the nearest cent, half up, as the table promises.
func toCents(m int64) string {
	c := (m + 5000) / 10000
	return fmt.Sprintf("$%d.%02d", c/100, c%100)
}

func checkTable(t *testing.T, label, out string, by operator.BreakdownBy, rows map[string]*want, total *want) {
	t.Helper()
	lines := strings.Split(out, "\n")
	if head := strings.Fields(lines[0]); len(head) != 14 || head[0] != strings.ToUpper(string(by)) || head[3] != "DOLLARS" {
		t.Fatalf("%s: header %q", label, lines[0])
	}
	seen := 0
	var prev int64 = 1 << 62
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) != 14 {
			t.Fatalf("%s: line %q", label, line)
		}
		w := total
		if f[0] != "(total)" {
			if w = rows[f[0]]; w == nil {
				t.Fatalf("%s: row %q the records do not have", label, f[0])
			}
			if w.micros > prev {
				t.Fatalf("%s: %s out of order (largest spend first)", label, f[0])
			}
			prev = w.micros
			seen++
		}
		merged, perMerged, pred, actual := "-", "-", "-", "-"
		if len(w.prs) > 0 {
			merged = strconv.Itoa((200*len(w.merged)+len(w.prs))/(2*len(w.prs))) + "%"
		}
		if len(w.merged) > 0 {
			perMerged = toCents(w.perMerged())
		}
		if w.predRecords > 0 {
			pred, actual = toCents(w.predMicros), toCents(w.actualMicros)
		}
		exp := []string{f[0], strconv.Itoa(len(w.runs)), strconv.Itoa(w.attempts), toCents(w.micros), strconv.FormatInt(w.tokens, 10),
			strconv.FormatInt(w.turns, 10), (time.Duration(w.wallMs) * time.Millisecond).Round(time.Second).String(),
			toCents(w.pct(50)), toCents(w.pct(90)), strconv.Itoa(len(w.prs)), merged, perMerged, pred, actual}
		if !slices.Equal(f, exp) {
			t.Fatalf("%s: table row\n got %q\nwant %q", label, f, exp)
		}
		if f[0] == "(total)" {
			break
		}
	}
	if seen != len(rows) {
		t.Fatalf("%s: %d rows, want %d", label, seen, len(rows))
	}
}

func checkJSON(t *testing.T, label, out string, rows map[string]*want, total *want) {
	t.Helper()
	type row struct {
		Key             string      `json:"key"`
		Runs            int         `json:"runs"`
		Attempts        int         `json:"attempts"`
		Micros          int64       `json:"micros"`
		Dollars         json.Number `json:"dollars"`
		Tokens          int64       `json:"tokens"`
		Turns           int64       `json:"turns"`
		WallMs          int64       `json:"wallMs"`
		P50             int64       `json:"p50Micros"`
		P90             int64       `json:"p90Micros"`
		PullRequests    int         `json:"pullRequests"`
		Merged          int         `json:"merged"`
		Closed          int         `json:"closed"`
		MicrosPerMerged int64       `json:"microsPerMerged"`
		Predicted       struct {
			Records   int   `json:"records"`
			Predicted int64 `json:"predictedMicros"`
			Actual    int64 `json:"actualMicros"`
			MeanPred  int64 `json:"meanPredictedMicros"`
			MeanAct   int64 `json:"meanActualMicros"`
		} `json:"predicted"`
	}
	var rep struct {
		Rows                []row  `json:"rows"`
		Total               row    `json:"total"`
		PullRequestOutcomes string `json:"pullRequestOutcomes"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Rows) != len(rows) || rep.PullRequestOutcomes != "joined" {
		t.Fatalf("%s: %d rows, %v: %s", label, len(rep.Rows), err, out)
	}
	for _, r := range append(rep.Rows, rep.Total) {
		w := rows[r.Key]
		if r.Key == "total" {
			w = total
		}
		if w == nil {
			t.Fatalf("%s: json row %q", label, r.Key)
		}
		var meanPred, meanAct int64
		if w.predRecords > 0 {
			meanPred, meanAct = w.predMicros/int64(w.predRecords), w.actualMicros/int64(w.predRecords)
		}
		if r.Runs != len(w.runs) || r.Attempts != w.attempts || r.Micros != w.micros || string(r.Dollars) != decimal6(w.micros) ||
			r.Tokens != w.tokens || r.Turns != w.turns || r.WallMs != w.wallMs || r.P50 != w.pct(50) || r.P90 != w.pct(90) ||
			r.PullRequests != len(w.prs) || r.Merged != len(w.merged) || r.Closed != len(w.closed) || r.MicrosPerMerged != w.perMerged() ||
			r.Predicted.Records != w.predRecords || r.Predicted.Predicted != w.predMicros || r.Predicted.Actual != w.actualMicros ||
			r.Predicted.MeanPred != meanPred || r.Predicted.MeanAct != meanAct {
			t.Fatalf("%s: json row %+v\nwant %+v", label, r, *w)
		}
	}
}

func checkCSV(t *testing.T, label, out string, by operator.BreakdownBy, rows map[string]*want, total *want) {
	t.Helper()
	lines, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(lines) != len(rows)+2 || lines[0][0] != string(by) || lines[0][3] != "dollars" {
		t.Fatalf("%s: csv %v: %s", label, err, out)
	}
	for i, f := range lines[1:] {
		w := rows[f[0]]
		if i == len(lines)-2 {
			if f[0] != "(total)" {
				t.Fatalf("%s: last line %q, want the total", label, f)
			}
			w = total
		}
		if w == nil {
			t.Fatalf("%s: csv row %q", label, f)
		}
		share, perMerged := "", ""
		if len(w.prs) > 0 {
			share = strconv.FormatFloat(float64(len(w.merged))/float64(len(w.prs)), 'f', 4, 64)
		}
		if len(w.merged) > 0 {
			perMerged = decimal6(w.perMerged())
		}
		var meanPred, meanAct int64
		if w.predRecords > 0 {
			meanPred, meanAct = w.predMicros/int64(w.predRecords), w.actualMicros/int64(w.predRecords)
		}
		exp := []string{f[0], strconv.Itoa(len(w.runs)), strconv.Itoa(w.attempts), decimal6(w.micros), strconv.FormatInt(w.tokens, 10),
			strconv.FormatInt(w.turns, 10), strconv.FormatInt(w.wallMs, 10), decimal6(w.pct(50)), decimal6(w.pct(90)),
			strconv.Itoa(len(w.prs)), strconv.Itoa(len(w.merged)), strconv.Itoa(len(w.closed)), share, perMerged,
			strconv.Itoa(w.predRecords), decimal6(w.predMicros), decimal6(w.actualMicros), decimal6(meanPred), decimal6(meanAct)}
		if !slices.Equal(f, exp) {
			t.Fatalf("%s: csv line\n got %q\nwant %q", label, f, exp)
		}
	}
}
