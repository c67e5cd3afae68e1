package policy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/dispatch/policy"
	"github.com/pidispatch/pidispatch/jobs"
)

func TestParseScopedLimits_Valid(t *testing.T) {
	t.Parallel()
	l, err := policy.ParseScopedLimits([]byte(`{"version":1,"limits":[
		{"scope":"acme/web","concurrent":2,"day":10},
		{"scope":"/srv/proj","week":50},
		{"scope":"group/sub/api","concurrent":64,"day":1000000,"week":1}
	]}`))
	require.NoError(t, err)
	require.Equal(t, 3, l.Len())
	require.Equal(t, []policy.ScopeLimit{
		{Scope: "/srv/proj", Week: 50},
		{Scope: "acme/web", Concurrent: 2, Day: 10},
		{Scope: "group/sub/api", Concurrent: 64, Day: 1000000, Week: 1},
	}, l.Rows(), "rows sorted by scope")

	got, ok := l.Lookup("acme/web")
	require.True(t, ok)
	require.Equal(t, policy.ScopeLimit{Scope: "acme/web", Concurrent: 2, Day: 10}, got)
	for _, miss := range []string{"acme/web2", "acme", "/srv/proj/", "/srv", "ACME/WEB", ""} {
		_, ok := l.Lookup(miss)
		require.False(t, ok, "matching is exact: %q", miss)
	}

	rows := l.Rows()
	rows[0].Week = 999 // a copy
	again, _ := l.Lookup("/srv/proj")
	require.Equal(t, 50, again.Week)

	empty, err := policy.ParseScopedLimits([]byte(`{"version":1,"limits":[]}`))
	require.NoError(t, err)
	require.Equal(t, 0, empty.Len())
	var zero policy.ScopedLimits
	_, ok = zero.Lookup("acme/web")
	require.False(t, ok)
	require.Empty(t, zero.Rows())
}

func TestParseScopedLimits_Invalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		give  string
		field string
		rule  string
	}{
		{"Empty", ``, "", "empty"},
		{"NotObject", `[]`, "", "object"},
		{"NoVersion", `{"limits":[]}`, "version", "required"},
		{"VersionZero", `{"version":0,"limits":[]}`, "version", "must be 1"},
		{"VersionString", `{"version":"1","limits":[]}`, "version", "integer 1"},
		{"VersionFloat", `{"version":1.5,"limits":[]}`, "version", "integer 1"},
		{"VersionNewer", `{"version":2,"limits":[{"scope":"github:acme/web","dayUsd":"5"}]}`, "version", "newer than this build reads"},
		{"NoLimits", `{"version":1}`, "limits", "required"},
		{"UnknownTop", `{"version":1,"limits":[],"extra":1}`, "extra", "unknown field"},
		{"ZeroMonth", `{"version":1,"limits":[{"scope":"acme/web","month":0}]}`, "limits[0].month", "between 1 and 1000000"},
		{"ZeroDollars", `{"version":1,"limits":[{"scope":"a/b","dailyCostUsd":"0"}]}`, "limits[0].dailyCostUsd", "above 0"},
		{"NegativeDollars", `{"version":1,"limits":[{"scope":"a/b","weeklyCostUsd":"-1"}]}`, "limits[0].weeklyCostUsd", "dollar amount"},
		{"SevenDecimals", `{"version":1,"limits":[{"scope":"a/b","monthlyCostUsd":"0.0000001"}]}`, "limits[0].monthlyCostUsd", "6 decimals"},
		{"ExponentDollars", `{"version":1,"limits":[{"scope":"a/b","dailyCostUsd":1e3}]}`, "limits[0].dailyCostUsd", "dollar amount"},
		{"HugeDollars", `{"version":1,"limits":[{"scope":"a/b","dailyCostUsd":"1000000.000001"}]}`, "limits[0].dailyCostUsd", "at most 1000000"},
		{"NullDollars", `{"version":1,"limits":[{"scope":"a/b","dailyCostUsd":null}]}`, "limits[0].dailyCostUsd", "dollar amount"},
		{"BoolDollars", `{"version":1,"limits":[{"scope":"a/b","dailyCostUsd":true}]}`, "limits[0].dailyCostUsd", "dollar amount"},
		{"OldDollarName", `{"version":1,"limits":[{"scope":"a/b","dayUsd":"5"}]}`, "limits[0].dayUsd", "unknown field"},
		{"Misspelled", `{"version":1,"limits":[{"scope":"a/b","day":1},{"scope":"c/d","concurent":2}]}`, "limits[1].concurent", "unknown field"},
		{"DuplicateKey", `{"version":1,"limits":[{"scope":"a/b","day":1,"day":2}]}`, `"day"`, "duplicate key"},
		{"NoScope", `{"version":1,"limits":[{"day":1}]}`, "limits[0].scope", "required"},
		{"Star", `{"version":1,"limits":[{"scope":"*","day":1}]}`, "limits[0].scope", "not a scope"},
		{"RelativeFolder", `{"version":1,"limits":[{"scope":"proj","day":1}]}`, "limits[0].scope", "absolute folder"},
		{"UncleanFolder", `{"version":1,"limits":[{"scope":"/srv/proj/","day":1}]}`, "limits[0].scope", `clean path ("/srv/proj")`},
		{"DuplicateScope", `{"version":1,"limits":[{"scope":"a/b","day":1},{"scope":"c/d","day":1},{"scope":"a/b","week":1}]}`, "limits[2].scope", "duplicate of limits[0]"},
		{"NoLimit", `{"version":1,"limits":[{"scope":"a/b"}]}`, "limits[0]", "at least one"},
		{"ZeroDay", `{"version":1,"limits":[{"scope":"a/b","day":0}]}`, "limits[0].day", "between 1 and 1000000"},
		{"NegativeWeek", `{"version":1,"limits":[{"scope":"a/b","week":-1}]}`, "limits[0].week", "between 1 and 1000000"},
		{"HugeConcurrent", `{"version":1,"limits":[{"scope":"a/b","concurrent":65}]}`, "limits[0].concurrent", "between 1 and 64"},
		{"FloatDay", `{"version":1,"limits":[{"scope":"a/b","day":1.5}]}`, "limits[0].day", "integer"},
		{"StringDay", `{"version":1,"limits":[{"scope":"a/b","day":"3"}]}`, "limits[0].day", "integer"},
		{"NullRow", `{"version":1,"limits":[null]}`, "limits[0].scope", "required"},
		{"RowNotObject", `{"version":1,"limits":["a/b"]}`, "limits[0]", "object"},
		{"Trailing", `{"version":1,"limits":[]}]`, "", "after the top-level value"},
		{"InvalidUTF8", "{\"version\":1,\"limits\":[{\"scope\":\"a/\xff\",\"day\":1}]}", "", "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := policy.ParseScopedLimits([]byte(tt.give))
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.rule)
			require.True(t, strings.HasPrefix(err.Error(), "scoped limits: "), err.Error())
			if tt.field != "" {
				var fe *jobs.FieldError
				require.ErrorAs(t, err, &fe, "%v", err)
				require.Equal(t, tt.field, fe.Field, "%v", err)
			}
		})
	}
}

// A month count and the dollar windows are read and enforced, not refused:
// the rows carry them to the budgets.
func TestParseScopedLimits_MonthAndDollars(t *testing.T) {
	t.Parallel()
	l, err := policy.ParseScopedLimits([]byte(`{"version":1,"limits":[
		{"scope":"acme/web","month":300},
		{"scope":"acme/api","dailyCostUsd":"2.50","weeklyCostUsd":10,"monthlyCostUsd":"0.000001"},
		{"scope":"/srv/p","day":3,"monthlyCostUsd":"1000000"}
	]}`))
	require.NoError(t, err)
	web, _ := l.Lookup("acme/web")
	require.Equal(t, policy.ScopeLimit{Scope: "acme/web", Month: 300}, web)
	require.False(t, web.HasDollars())
	api, _ := l.Lookup("acme/api")
	require.Equal(t, policy.ScopeLimit{Scope: "acme/api", DailyCostMicros: 2_500_000, WeeklyCostMicros: 10_000_000, MonthlyCostMicros: 1}, api)
	require.True(t, api.HasDollars())
	p, _ := l.Lookup("/srv/p")
	require.Equal(t, policy.ScopeLimit{Scope: "/srv/p", Day: 3, MonthlyCostMicros: 1_000_000 * jobs.Micros}, p)
	require.True(t, p.HasDollars())
	for _, one := range []policy.ScopeLimit{{DailyCostMicros: 1}, {WeeklyCostMicros: 1}, {MonthlyCostMicros: 1}} {
		require.True(t, one.HasDollars(), "%+v", one)
	}
}

// The reference page documents every field the parser reads.
func TestScopedLimitsDocNamesDollarFields(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "scoped-limits.md"))
	require.NoError(t, err)
	for _, f := range []string{"month", "dailyCostUsd", "weeklyCostUsd", "monthlyCostUsd"} {
		require.Contains(t, string(data), "| `"+f+"` |", f)
	}
	require.NotContains(t, string(data), "A `month` field is refused")
}

func FuzzParseScopedLimits(f *testing.F) {
	f.Add([]byte(`{"version":1,"limits":[{"scope":"acme/web","concurrent":2,"day":10,"week":50}]}`))
	f.Add([]byte(`{"version":1,"limits":[{"scope":"/srv/p","day":1},{"scope":"/srv/p","day":2}]}`))
	f.Add([]byte(`{"version":1,"limits":[{"scope":"a/b","month":3,"dailyCostUsd":"2.5","weeklyCostUsd":7}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1e999,"limits":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := policy.ParseScopedLimits(data)
		if err != nil {
			return
		}
		for _, r := range l.Rows() {
			got, ok := l.Lookup(r.Scope)
			if !ok || got != r {
				t.Fatalf("row %+v not found by its scope", r)
			}
			if r.Concurrent < 0 || r.Concurrent > policy.MaxScopeConcurrent || r.Day < 0 || r.Week < 0 || r.Month < 0 ||
				r.DailyCostMicros < 0 || r.WeeklyCostMicros < 0 || r.MonthlyCostMicros < 0 ||
				r.Concurrent == 0 && r.Day == 0 && r.Week == 0 && r.Month == 0 && !r.HasDollars() {
				t.Fatalf("accepted an impossible row %+v", r)
			}
		}
	})
}

func ExampleScopedLimits_Lookup() {
	l, err := policy.ParseScopedLimits([]byte(`{"version":1,"limits":[{"scope":"acme/web","concurrent":1,"day":20}]}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(l.Lookup("acme/web"))
	fmt.Println(l.Lookup("acme/api"))
	_, err = policy.ParseScopedLimits([]byte(`{"version":1,"limits":[{"scope":"acme/web","concurent":1}]}`))
	fmt.Println(err)
	// Output:
	// {acme/web 1 20 0 0 0 0 0} true
	// { 0 0 0 0 0 0 0} false
	// scoped limits: limits[0].concurent: unknown field
}
