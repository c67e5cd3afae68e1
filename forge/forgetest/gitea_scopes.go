package forgetest

import (
	"encoding/json"
	"net/http"
	"testing"
)

// ScopedUser is a Gitea user that is no site administrator, with the
// password that makes its access tokens, each of the scopes a test chooses.
type ScopedUser struct {
	ID       int64
	Login    string
	g        *Gitea
	password string
}

// CreateScopedUser makes a user that is not a site administrator and has
// no token yet: Token makes each one.
func (g *Gitea) CreateScopedUser(t testing.TB, login string) ScopedUser {
	t.Helper()
	pw := "pw-" + randHex(12)
	var u struct {
		ID int64 `json:"id"`
	}
	out := g.API(t, "", http.MethodPost, "/admin/users", map[string]any{
		"username": login, "email": login + "@example.invalid", "password": pw, "must_change_password": false,
	})
	if err := json.Unmarshal(out, &u); err != nil || u.ID == 0 {
		t.Fatalf("gitea create user %s: %v: %s", login, err, out)
	}
	return ScopedUser{ID: u.ID, Login: login, g: g, password: pw}
}

// Token makes an access token of u named name with exactly scopes
// (write:repository, write:issue, read:user, ...).
func (u ScopedUser) Token(t testing.TB, name string, scopes ...string) string {
	t.Helper()
	var tok struct {
		SHA1 string `json:"sha1"`
	}
	out := u.g.call(t, http.MethodPost, "/users/"+u.Login+"/tokens", map[string]any{"name": name, "scopes": scopes},
		func(r *http.Request) { r.SetBasicAuth(u.Login, u.password) })
	if err := json.Unmarshal(out, &tok); err != nil || tok.SHA1 == "" {
		t.Fatalf("gitea token for %s: %v: %s", u.Login, err, out)
	}
	return tok.SHA1
}

// AddCollaborator gives login the collaborator role permission (read,
// write or admin) on repo ("owner/name"), as the admin.
func (g *Gitea) AddCollaborator(t testing.TB, repo, login, permission string) {
	t.Helper()
	g.API(t, "", http.MethodPut, "/repos/"+repo+"/collaborators/"+login, map[string]any{"permission": permission})
}
