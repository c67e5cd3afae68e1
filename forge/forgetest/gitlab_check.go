package forgetest

import (
	"net/http"
	"slices"
	"strings"

	gitlab "gitlab.com/gitlab-org/api/client-go/v2"
)

// ParentUser is the login of the parent token's user (GET /user answers it).
const ParentUser = "root"

// SetParentScopes sets the parent token's scopes, as
// GET /personal_access_tokens/self answers them; unset: api.
func (g *GitLab) SetParentScopes(scopes ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.parentScopes = &scopes
}

// serveTokenSelf answers GET /personal_access_tokens/self, reporting false
// for any other request: the parent's scopes and user, a minted token's
// scopes. A token with neither api nor read_api may not ask (403
// insufficient_scope).
func (g *GitLab) serveTokenSelf(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet || r.URL.Path != "/api/v4/personal_access_tokens/self" {
		return false
	}
	tok := r.Header.Get("PRIVATE-TOKEN")
	if tok == "" {
		tok, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	out := gitlab.PersonalAccessToken{Active: true}
	switch {
	case tok == g.Parent:
		out.ID, out.Name, out.UserID, out.Scopes = 1, "parent", g.userID(ParentUser), []string{"api"}
		if g.parentScopes != nil {
			out.Scopes = *g.parentScopes
		}
	case g.tokens[tok] != "":
		for id, t := range g.ids {
			if t == tok {
				out.ID, out.Name, out.Scopes = id, "pidispatch-job", *g.minted[id-1].Scopes
			}
		}
	default:
		writeJSON(w, http.StatusUnauthorized, glError{"401 Unauthorized"})
		return true
	}
	if !slices.Contains(out.Scopes, "api") && !slices.Contains(out.Scopes, "read_api") {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "insufficient_scope"})
		return true
	}
	writeJSON(w, http.StatusOK, out)
	return true
}

// parentAccess is what GET /projects/:id says of the parent token's role
// on p (its membership, SetMember of ParentUser); nil for any other token.
// The caller holds g.mu.
func (g *GitLab) parentAccess(p *glProject, tok string) *gitlab.Permissions {
	if tok != g.Parent {
		return nil
	}
	perms := &gitlab.Permissions{}
	if level, ok := p.members[g.userID(ParentUser)]; ok {
		perms.ProjectAccess = &gitlab.ProjectAccess{AccessLevel: level}
	}
	return perms
}
