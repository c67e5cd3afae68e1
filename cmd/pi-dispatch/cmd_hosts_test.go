package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/registry"
)

var (
	spacesRE = regexp.MustCompile(` {2,}`)
	ageRE    = regexp.MustCompile(`^(\S+) \d+s `)
)

// tableLines collapses a table's column padding and its ages, which depend on
// timing, so the golden compares content and column order.
func tableLines(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		l = spacesRE.ReplaceAllString(l, " ")
		lines[i] = ageRE.ReplaceAllString(l, "$1 <age> ")
	}
	return strings.Join(lines, "\n") + "\n"
}

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestHostsGolden(t *testing.T) {
	db := livetest.Valkey(t)
	env := vars(db.URL)

	expect(t, runCLI(t, env, "hosts"), db.URL, 0,
		"no hosts: no worker has a registry row at <url> (a worker beats every 15s; a row expires 90s after its last beat)\n", "")
	expect(t, runCLI(t, env, "hosts", "--json"), db.URL, 0, "[]\n", "")

	publish(t, db.Client, "alpha", registry.Facts{
		Routes:      registry.Value(true),
		Caps:        registry.Value("s:github,w:ci"),
		Concurrency: registry.Value(3),
		ImageDigest: registry.Value(digest),
		Image:       registry.Value("pi-job:latest"),
		TZ:          registry.Value("Europe/Amsterdam"),
		FPCron:      registry.Value("fedcba9876543210"),
		CronCount:   registry.Value(2),
	})
	publish(t, db.Client, "quiet", registry.Facts{})

	r := runCLI(t, env, "hosts")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("%+v", r)
	}
	want := `NAME AGE ROUTES CAPS CONCURRENCY DIGEST TZ CRON
alpha <age> yes s:github,w:ci 3 0123456789ab Europe/Amsterdam fedcba98
quiet <age> no - - - - -
`
	if got := tableLines(r.stdout); got != want {
		t.Fatalf("hosts table\n got:\n%s\nwant:\n%s\nraw:\n%s", got, want, r.stdout)
	}
	// Columns line up: every row's second column starts where AGE does.
	lines := strings.Split(r.stdout, "\n")
	col := strings.Index(lines[0], "AGE")
	for _, l := range lines[1:3] {
		if l[col-1] != ' ' || l[col] == ' ' {
			t.Fatalf("misaligned row %q (AGE at %d)", l, col)
		}
	}

	r = runCLI(t, env, "hosts", "--json")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("%+v", r)
	}
	var hosts []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &hosts); err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 2 {
		t.Fatalf("hosts = %v", hosts)
	}
	a := hosts[0]
	for k, v := range map[string]any{
		"name": "alpha", "routes": true, "caps": "s:github,w:ci", "concurrency": 3.0,
		"imageDigest": digest, "image": "pi-job:latest", "tz": "Europe/Amsterdam",
		"fpCron": "fedcba9876543210", "cronCount": 2.0,
	} {
		if a[k] != v {
			t.Errorf("%s = %v, want %v", k, a[k], v)
		}
	}
	if age, ok := a["ageMs"].(float64); !ok || age < 0 || age > 60_000 {
		t.Errorf("ageMs = %v", a["ageMs"])
	}
	if _, ok := a["beatAt"].(string); !ok || a["beatAt"] == "" {
		t.Errorf("beatAt = %v", a["beatAt"])
	}
	if hosts[1]["name"] != "quiet" || hosts[1]["routes"] != false {
		t.Errorf("quiet = %v", hosts[1])
	}

	expect(t, runCLI(t, env, "hosts", "--yaml"), db.URL, 2, "",
		"pi-dispatch hosts: unexpected argument \"--yaml\" (usage: pi-dispatch hosts [--json])\n")
}

// An unreadable registry is an error, never "no hosts".
func TestHostsRegistryUnreadable(t *testing.T) {
	db := livetest.Valkey(t)
	if err := db.Client.Set(context.Background(), registry.LiveKey, "junk", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, vars(db.URL), "hosts")
	if r.code != exitFailure || strings.Contains(r.stdout, "no hosts") || !strings.Contains(r.stderr, "host registry unreachable") {
		t.Fatalf("%+v", r)
	}
}

func TestShortValues(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{shortDigest(digest), "0123456789ab"},
		{shortDigest(""), "-"},
		{shortDigest("sha256:abc"), "abc"},
		{shortFingerprint("0123456789abcdef"), "01234567"},
		{shortFingerprint(""), "-"},
		{shortFingerprint(registry.InvalidFingerprint), "invalid"},
		{concurrency(0), "-"},
		{concurrency(4), "4"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
