package metrics

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/pidispatch/pidispatch/dispatch"
)

// allSeries is a Metrics with every polled source answering, so Gather
// returns every family the package can export.
func allSeries(t *testing.T) map[string]bool {
	t.Helper()
	w := WindowReaderFunc(func(context.Context) ([]Window, error) { return []Window{{Name: "day", Used: 1, Cap: 2}}, nil })
	m := New("h", WithSources(Sources{
		Queues: QueueCounterFunc(func(context.Context) ([]QueueCounts, error) {
			return []QueueCounts{{Queue: "q", ByState: map[string]int64{"waiting": 1}}}, nil
		}),
		Held:   HeldCounterFunc(func(context.Context) (int, error) { return 0, nil }),
		Starts: w, Dollars: w,
	}))
	m.Observe(dispatch.Event{Kind: dispatch.EventGate, Gate: "g", Decision: "defer"})
	m.Observe(dispatch.Event{Kind: dispatch.EventFinish, Outcome: "completed", Reason: "completed"})
	m.Observe(dispatch.Event{Kind: dispatch.EventReach, Service: "valkey", Up: true})
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), Namespace+"_") {
			names[mf.GetName()] = true
		}
	}
	return names
}

var metricName = regexp.MustCompile(`\bpidispatch_[a-z_]+`)

// docs/metrics.md names every metric the package exports, and names no
// pidispatch_ metric it does not.
func TestMetricsDocumented(t *testing.T) {
	raw, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	have := allSeries(t)
	for name := range have {
		if !strings.Contains(doc, "`"+name+"`") {
			t.Errorf("docs/metrics.md does not list %s", name)
		}
	}
	for _, name := range metricName.FindAllString(doc, -1) {
		if !have[seriesFamily(name)] {
			t.Errorf("docs/metrics.md names %s, which the package does not export", name)
		}
	}
}

// seriesFamily strips a histogram series' suffix.
func seriesFamily(name string) string {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, s); ok && strings.HasSuffix(base, "_seconds") {
			return base
		}
	}
	return name
}

// The alert rules of docs/metrics.md are a valid rules file: YAML with
// groups of rules, each an alert with an expression over exported metrics.
func TestMetricsDocAlertRules(t *testing.T) {
	raw, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := fenced(string(raw), "yaml")
	if len(blocks) != 1 {
		t.Fatalf("%d yaml blocks in docs/metrics.md, want 1 (the alert rules)", len(blocks))
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(blocks[0]))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("alert rules: %v", err)
	}
	have := allSeries(t)
	var alerts []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %+v: want an alert, an expr and a summary", r)
			}
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
				t.Errorf("%s: unbalanced parentheses in %q", r.Alert, r.Expr)
			}
			for _, name := range metricName.FindAllString(r.Expr, -1) {
				if !have[seriesFamily(name)] {
					t.Errorf("%s uses %s, which the package does not export", r.Alert, name)
				}
			}
		}
	}
	for _, want := range []string{"PidispatchFleetStuck", "PidispatchSpendCapNearlyFull", "PidispatchHostDown"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no %s rule among %v", want, alerts)
		}
	}
}

// fenced returns the bodies of the ```lang blocks of a Markdown text.
func fenced(md, lang string) []string {
	var out []string
	var cur *strings.Builder
	for _, line := range strings.Split(md, "\n") {
		switch {
		case cur == nil && strings.TrimSpace(line) == "```"+lang:
			cur = &strings.Builder{}
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return out
}
