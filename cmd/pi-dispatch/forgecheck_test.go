package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v84/github"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
)

// doctor's lines, forge by forge: the OK findings on one ✓ line, then each
// other finding on its own line (✗ when something is missing, ⚠ when it
// could not be verified).
func TestCredentialChecksLines(t *testing.T) {
	got := credentialChecks([]workspace.CredentialCheck{
		{Forge: jobs.ForgeForgejo, OK: true, Detail: "FORGEJO_TOKEN (pi-bot) has read:user"},
		{Forge: jobs.ForgeForgejo, Repo: "a/b", Missing: []string{"Administrator on a/b"}, Detail: "the bot pi-bot needs Administrator on a/b", Fix: "make it one"},
		{Forge: jobs.ForgeForgejo, Repo: "a/c", OK: true, Detail: "pi-bot is Administrator on a/c"},
		{Forge: jobs.ForgeGitHub, Unverified: true, Detail: "a fine-grained token", Fix: "check it"},
	})
	want := []operator.Check{
		{Status: operator.CheckOK, Name: "forge-credential", Detail: "forgejo credential: FORGEJO_TOKEN (pi-bot) has read:user; pi-bot is Administrator on a/c"},
		{Status: operator.CheckFail, Name: "forge-credential", Detail: "forgejo credential: the bot pi-bot needs Administrator on a/b", Fix: "make it one"},
		{Status: operator.CheckWarn, Name: "forge-credential", Detail: "github credential: a fine-grained token", Fix: "check it"},
	}
	if len(got) != len(want) {
		t.Fatalf("%+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if credentialChecks(nil) != nil {
		t.Fatal("no forge: no line")
	}
}

// receive --check asks GitHub (here its double) about the credential: a
// classic token without the repo scope, or an App installation without a
// permission, exits 2 naming it; the documented grants pass.
func TestReceiveCheckNamesGitHubGrants(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(t.TempDir(), "app.pem")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	git := forgetest.StartGitServer(t, nil)
	gh := forgetest.StartGitHub(t, git, 42, &key.PublicKey, time.Hour)
	gh.AddRepo("acme/api", "main")
	gh.AddClassicPAT("ghp_withrepo", "pi-bot", "repo", "acme/api")
	gh.AddClassicPAT("ghp_publiconly", "pi-bot", "public_repo", "acme/api")
	base := receiveVars(t, goodForgeTriggers)
	base["GITHUB_API_URL"] = gh.URL

	vars := maps.Clone(base)
	vars["GITHUB_PAT"] = "ghp_withrepo"
	r := runCLI(t, vars, "receive", "--check")
	if r.code != exitOK || !strings.Contains(r.stdout, "ok: github credential: GITHUB_PAT: a classic token of pi-bot with the repo scope\n") ||
		!strings.Contains(r.stdout, "ok: github credential: pi-bot may push to acme/api\n") {
		t.Fatalf("%+v", r)
	}

	vars["GITHUB_PAT"] = "ghp_publiconly"
	r = runCLI(t, vars, "receive", "--check")
	if r.code != exitUsage || !strings.Contains(r.stderr, "pi-dispatch receive: github credential: GITHUB_PAT: a classic token of pi-bot without the repo scope (it has public_repo)\n    fix: ") {
		t.Fatalf("%+v", r)
	}
	if strings.Contains(r.stdout+r.stderr, "ghp_publiconly") {
		t.Fatalf("the token was printed: %+v", r)
	}

	vars = maps.Clone(base)
	vars["GITHUB_PAT"] = ""
	vars["GITHUB_APP_ID"], vars["GITHUB_APP_INSTALLATION_ID"], vars["GITHUB_APP_PRIVATE_KEY_PATH"] = "42", "7", keyPath
	gh.SetInstallation("acme", &github.InstallationPermissions{Metadata: github.Ptr("read"), Contents: github.Ptr("write"), Issues: github.Ptr("write")})
	r = runCLI(t, vars, "receive", "--check")
	if r.code != exitUsage || !strings.Contains(r.stderr, "github credential: GitHub App 42, installation 7 (acme) lacks pull requests: write\n") {
		t.Fatalf("%+v", r)
	}
	if !strings.Contains(r.stdout, "ok: github credential: installed on acme/api\n") {
		t.Fatalf("%+v", r)
	}
}

// Against a real Gitea: doctor prints a line naming the scope the token
// lacks, or the Administrator role the bot lacks, and receive --check exits
// 2 with the same; the documented scopes and role pass both.
func TestDoctorAndReceiveCheckNameForgejoGrants(t *testing.T) {
	g := forgetest.StartGitea(t)
	_, vars := doctorHost(t)
	g.API(t, "", http.MethodPost, "/user/repos", map[string]any{"name": "web", "auto_init": true, "default_branch": "main"})
	repo := g.AdminUser + "/web"
	bot := g.CreateScopedUser(t, "pi-bot")
	g.AddCollaborator(t, repo, bot.Login, "admin")
	writer := g.CreateScopedUser(t, "pi-writer")
	g.AddCollaborator(t, repo, writer.Login, "write")
	documented := []string{"write:repository", "write:issue", "read:user"}
	triggers := filepath.Join(t.TempDir(), "triggers.json")
	if err := os.WriteFile(triggers, []byte(`{"triggers": [
 {"on": {"type": "comment", "repos": ["`+repo+`"], "phrase": "/pi"}, "run": {"kind": "forgejo", "flow": "fix"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	vars["PI_TRIGGERS_FILE"], vars["FORGEJO_URL"] = triggers, g.URL
	receive := func(tok string) result {
		rv := maps.Clone(vars)
		rv["PI_ENV_FILE"], rv["FORGEJO_TOKEN"], rv["FORGEJO_WEBHOOK_SECRET"] = "/dev/null", tok, "hook-secret"
		r := runCLI(t, rv, "receive", "--check")
		if strings.Contains(r.stdout+r.stderr, tok) {
			t.Fatalf("the token was printed: %+v", r)
		}
		return r
	}
	doctor := func(tok string) result {
		vars["FORGEJO_TOKEN"] = tok
		r := runCLI(t, vars, "doctor")
		if strings.Contains(r.stdout+r.stderr, tok) {
			t.Fatalf("the token was printed: %+v", r)
		}
		return r
	}

	tok := bot.Token(t, "documented", documented...)
	r := doctor(tok)
	if r.code != exitOK || !strings.Contains(r.stdout,
		"✓ forgejo credential: FORGEJO_TOKEN (pi-bot) has read:user, write:issue, write:repository; pi-bot is Administrator on "+repo+"\n") {
		t.Fatalf("%+v", r)
	}
	if r = receive(tok); r.code != exitOK || !strings.Contains(r.stdout, "ok: forgejo credential: pi-bot is Administrator on "+repo+"\n") {
		t.Fatalf("%+v", r)
	}

	tok = bot.Token(t, "no-issue", "write:repository", "read:user")
	r = doctor(tok)
	if r.code != exitFailure || !strings.Contains(r.stdout,
		"✗ forgejo credential: FORGEJO_TOKEN (pi-bot) lacks the scope write:issue\n    fix: make a new token with read:user, write:issue, write:repository and set FORGEJO_TOKEN") {
		t.Fatalf("%+v", r)
	}
	if r = receive(tok); r.code != exitUsage || !strings.Contains(r.stderr, "pi-dispatch receive: forgejo credential: FORGEJO_TOKEN (pi-bot) lacks the scope write:issue\n") {
		t.Fatalf("%+v", r)
	}

	tok = writer.Token(t, "documented", documented...)
	want := "forgejo credential: the bot pi-writer needs Administrator on " + repo + " to read collaborators' permissions (it has Write)\n"
	if r = doctor(tok); r.code != exitFailure || !strings.Contains(r.stdout, "✗ "+want) {
		t.Fatalf("%+v", r)
	}
	if r = receive(tok); r.code != exitUsage || !strings.Contains(r.stderr, "pi-dispatch receive: "+want) {
		t.Fatalf("%+v", r)
	}
}
