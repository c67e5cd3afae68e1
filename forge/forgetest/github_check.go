package forgetest

import (
	"net/http"
	"slices"
	"strings"

	"github.com/google/go-github/v84/github"
)

// ghInstall is the App's installation as GET /app/installations/{id}
// answers it, and what it lets the App mint.
type ghInstall struct {
	set     bool
	account string
	perms   *github.InstallationPermissions
	repos   []string // "owner/name"; nil: every repository of the account
}

// ghPAT is a personal access token the double knows.
type ghPAT struct {
	login string
	// scopes is a classic token's X-OAuth-Scopes; nil: a fine-grained
	// token, whose answers carry no such header.
	scopes *string
	push   map[string]bool
}

// checkRoutes adds what the credential checks read: the installation (a
// personal token's user is GET /user, github_publish.go).
func (g *GitHub) checkRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /app/installations/{id}", g.installation)
}

// SetInstallation sets the App's installation: the account it is on, its
// permissions, and the repositories ("owner/name") it includes (none:
// every repository). A mint asking for a repository it does not include,
// or for more than perms, is refused 422, as GitHub refuses it. Unset, the
// installation has the permissions publishing needs, on every repository.
func (g *GitHub) SetInstallation(account string, perms *github.InstallationPermissions, repos ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.install = ghInstall{set: true, account: account, perms: perms, repos: repos}
}

// AddClassicPAT makes tok a classic personal token of login with scopes
// (X-OAuth-Scopes, comma separated), which may push to the repositories
// push names.
func (g *GitHub) AddClassicPAT(tok, login, scopes string, push ...string) {
	g.addPAT(tok, ghPAT{login: login, scopes: &scopes}, push)
}

// AddFineGrainedPAT makes tok a fine-grained personal token of login, which
// may push to the repositories push names.
func (g *GitHub) AddFineGrainedPAT(tok, login string, push ...string) {
	g.addPAT(tok, ghPAT{login: login}, push)
}

func (g *GitHub) addPAT(tok string, p ghPAT, push []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p.push = map[string]bool{}
	for _, r := range push {
		p.push[r] = true
	}
	if g.pats == nil {
		g.pats = map[string]ghPAT{}
	}
	g.pats[tok] = p
}

// installPerms is the installation's permissions. The caller holds g.mu.
func (g *GitHub) installPerms() *github.InstallationPermissions {
	if g.install.set {
		return g.install.perms
	}
	return &github.InstallationPermissions{Metadata: github.Ptr("read"), Contents: github.Ptr("write"),
		Issues: github.Ptr("write"), PullRequests: github.Ptr("write")}
}

// installation answers GET /app/installations/{id} for the App's JWT.
func (g *GitHub) installation(w http.ResponseWriter, r *http.Request) {
	if !g.checkJWT(r.Header.Get("Authorization")) {
		writeJSON(w, http.StatusUnauthorized, github.ErrorResponse{Message: "A JSON web token could not be decoded"})
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	selection := "all"
	if g.install.repos != nil {
		selection = "selected"
	}
	inst := github.Installation{AppID: github.Ptr(g.appID), Permissions: g.installPerms(), RepositorySelection: github.Ptr(selection)}
	if g.install.account != "" {
		inst.Account = &github.User{Login: github.Ptr(g.install.account)}
	}
	writeJSON(w, http.StatusOK, inst)
}

// refuseMint answers GitHub's message refusing opts, "" when it may be minted.
func (g *GitHub) refuseMint(opts github.InstallationTokenOptions) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.install.repos != nil {
		for _, name := range opts.Repositories {
			if !slices.ContainsFunc(g.install.repos, func(r string) bool { _, n, _ := strings.Cut(r, "/"); return n == name }) {
				return "There is at least one repository that does not exist or is not accessible to the parent installation."
			}
		}
	}
	if opts.Permissions == nil {
		return ""
	}
	level := map[string]int{"read": 1, "write": 2, "admin": 3}
	have, want := g.installPerms(), opts.Permissions
	for _, p := range [][2]*string{{want.Metadata, have.Metadata}, {want.Contents, have.Contents},
		{want.Issues, have.Issues}, {want.PullRequests, have.PullRequests}} {
		if p[0] != nil && (p[1] == nil || level[*p[1]] < level[*p[0]]) {
			return "The permissions requested are not granted to this installation."
		}
	}
	return ""
}

// patUser answers GET /user for a personal token, with a classic token's
// X-OAuth-Scopes, reporting false for any other token.
func (g *GitHub) patUser(w http.ResponseWriter, r *http.Request) bool {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	g.mu.Lock()
	p, ok := g.pats[tok]
	g.mu.Unlock()
	if !ok {
		return false
	}
	if p.scopes != nil {
		w.Header().Set("X-OAuth-Scopes", *p.scopes)
	}
	writeJSON(w, http.StatusOK, github.User{Login: github.Ptr(p.login), ID: github.Ptr(int64(1000 + len(p.login))), Type: github.Ptr("User")})
	return true
}

// patPermissions are what GET /repos/{repo} says a personal token's user
// may do there; nil for any other token.
func (g *GitHub) patPermissions(r *http.Request, repo string) *github.RepositoryPermissions {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.pats[tok]
	if !ok {
		return nil
	}
	return &github.RepositoryPermissions{Admin: github.Ptr(false), Push: github.Ptr(p.push[repo]), Pull: github.Ptr(true)}
}
