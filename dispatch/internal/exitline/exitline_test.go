package exitline

import (
	"encoding/json"
	"strings"
	"testing"
)

// The exit line keeps its documented fields, each checked, and no string
// that holds a secret value, whole or in part.
func TestClean(t *testing.T) {
	secrets := map[string]string{"TOKEN": "s3cret-value", "EMPTY": ""}
	for _, tc := range []struct {
		name, raw, want string
		unknown         bool
	}{
		{"documented", `{"event":"exit","turns":3,"tokens":1234,"cost":0.05}`, `{"event":"exit","turns":3,"tokens":1234,"cost":0.05}`, false},
		{"agent line", `{"event":"exit","outcome":"completed","reason":"completed","turns":2,"tokens":{"input":2500,"output":52,"cacheRead":1800,"cacheWrite":100,"total":4452,"extra":1},"cost":0.003065,"provider":"anthropic","model":"claude-haiku-4-5","requests":2,"retries":0,"maxTurns":50,"durationMs":8123}`,
			`{"event":"exit","outcome":"completed","reason":"completed","turns":2,"tokens":{"input":2500,"output":52,"cacheRead":1800,"cacheWrite":100,"total":4452},"cost":0.003065,"provider":"anthropic","model":"claude-haiku-4-5","requests":2,"retries":0,"maxTurns":50,"durationMs":8123}`, false},
		{"undocumented fields", `{"event":"exit","note":"s3cret-value","checkedEnv":{"A":"present"},"turns":1}`, `{"event":"exit","turns":1}`, false},
		{"secret equal", `{"event":"exit","model":"s3cret-value","provider":"anthropic"}`, `{"event":"exit","provider":"anthropic"}`, false},
		{"secret inside", `{"event":"exit","model":"x-s3cret-value-y"}`, `{"event":"exit"}`, false},
		{"free text", `{"event":"exit","model":"has space","outcome":"pwned","reason":"whatever"}`, `{"event":"exit"}`, false},
		{"bounds", `{"event":"exit","turns":-1,"tokens":1e300,"cost":-5,"maxTurns":99999999,"requests":1.5}`, `{"event":"exit"}`, false},
		{"wrong types", `{"event":"exit","turns":"3","cost":"0.1","provider":7}`, `{"event":"exit"}`, false},
		{"unknown secrets", `{"event":"exit","model":"m","provider":"p","outcome":"failed","turns":1}`, `{"event":"exit","outcome":"failed","turns":1}`, true},
	} {
		got := string(Clean([]byte(tc.raw), secrets, tc.unknown))
		if got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
		if strings.Contains(got, "s3cret") {
			t.Errorf("%s: the secret survived: %s", tc.name, got)
		}
	}
	if got := Clean(nil, secrets, false); got != nil {
		t.Errorf("no exit line: %s", got)
	}
}

// A hostile job reports names made to ping, link, inject HTML or turn text
// around (bidi controls) wherever the record is shown: each such field is
// refused, with why, and the rest of the line is kept.
func TestHostileStringsRefused(t *testing.T) {
	for _, name := range []string{
		"@org/everyone", "<!channel>", "<@U123>", "<http://x|y>", "--output=/tmp/x",
		"claude\u202egnp.exe", "a\u2066b", "a\u200eb", "a\u200fb", "a\u061cb", "a\u202ab",
		"`code`", "[x](http://evil)", "![i](http://evil/i.png)", "<img src=x>", "a&amp;b",
		"a\x7fb", "a\u0085b", "a\u2028b", "a\ufeffb",
	} {
		raw, _ := json.Marshal(map[string]any{"event": "exit", "turns": 1, "model": name, "provider": name})
		got, refused := Check(raw, nil, false)
		if string(got) != `{"event":"exit","turns":1}` {
			t.Errorf("%q: kept %s", name, got)
		}
		if len(refused) != 2 || refused[0].Field != "provider" || refused[1].Field != "model" || refused[0].Why == "" {
			t.Errorf("%q: refusals %+v", name, refused)
		}
		for _, r := range refused {
			if strings.Contains(r.Why, name) {
				t.Errorf("%q: the reason repeats the job's text: %s", name, r.Why)
			}
		}
	}
	// A name the gateway would show as it is passes.
	got, refused := Check([]byte(`{"event":"exit","provider":"anthropic","model":"claude-haiku-4-5@20251001"}`), nil, false)
	if string(got) != `{"event":"exit","provider":"anthropic","model":"claude-haiku-4-5@20251001"}` || len(refused) != 0 {
		t.Errorf("a plain name: %s %+v", got, refused)
	}
}
