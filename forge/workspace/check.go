package workspace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-github/v84/github"
	gitlab "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/jobs"
)

// CheckTimeout bounds the check of one forge's credential: every call to
// the forge it makes.
const CheckTimeout = 15 * time.Second

// PermissionsDoc is where the user reads what each credential needs.
const PermissionsDoc = "docs/forges.md#permissions-each-forge-needs"

// CredentialCheck is one finding of CheckCredentials: about the credential
// itself (Repo "") or about one repository it must reach.
type CredentialCheck struct {
	Forge jobs.Forge
	// Repo is the repository the finding is about; "": the credential.
	Repo string
	// OK: the forge answered that the credential holds what it needs here.
	OK bool
	// Unverified: the check could not tell (the forge did not answer, or
	// it does not say what the credential may do, as for a fine-grained
	// GitHub token). Neither OK nor a known fault.
	Unverified bool
	// Missing names each scope, permission or role the credential lacks,
	// in the words of docs/forges.md (write:issue, contents: write,
	// Administrator on owner/name, ...).
	Missing []string
	// Detail is what was found, one line, no secret in it.
	Detail string
	// Fix is what to do about it, one line; "" when OK.
	Fix string
}

// Failed reports whether the forge answered that something the credential
// needs is missing, or refused the credential.
func (c CredentialCheck) Failed() bool { return !c.OK && !c.Unverified }

// CheckCredentials asks each forge of m whether its credential holds what
// docs/forges.md asks, for it and for the repositories repos lists under
// its kind. See the function CheckCredentials.
func (m *Manager) CheckCredentials(ctx context.Context, repos map[jobs.Forge][]string) []CredentialCheck {
	return CheckForges(ctx, m.cfg.Forges, repos)
}

// CheckForges checks each forge's credential (CheckCredentials), the forges
// at once, and answers their findings in the order of the forges' kinds.
func CheckForges(ctx context.Context, forges map[jobs.Forge]Forge, repos map[jobs.Forge][]string) []CredentialCheck {
	kinds := make([]jobs.Forge, 0, len(forges))
	for k := range forges {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	found := make([][]CredentialCheck, len(kinds))
	var wg sync.WaitGroup
	for i, k := range kinds {
		wg.Go(func() { found[i] = CheckCredentials(ctx, k, forges[k], repos[k]) })
	}
	wg.Wait()
	var out []CredentialCheck
	for _, f := range found {
		out = append(out, f...)
	}
	return out
}

// CheckCredentials calls the forge with f's credential and says, against
// the table of docs/forges.md, what it lacks, within CheckTimeout. It
// writes nothing a person would see:
//
//   - GitHub App: the installation's permissions (GET /app/installations/{id},
//     with the App's JWT) must hold metadata: read, contents, issues and pull
//     requests: write; for each repository a token restricted to it and to
//     reading metadata is minted, then revoked: one that cannot be is a
//     repository the App is not installed on.
//   - GitHub token: GET /user must answer; a classic token's scopes
//     (X-OAuth-Scopes) must hold repo; a fine-grained token's permissions
//     cannot be read (Unverified); for each repository GET /repos/{repo}
//     must say the token's user may push.
//   - Forgejo/Gitea: GET /user (read:user); write:issue and write:repository
//     are proven by writing to a repository that does not exist (Gitea
//     checks a token's scopes before it looks the repository up: 403 names
//     the scope the token lacks, 404 says it has it); for each repository
//     GET /repos/{repo} must say the token's user is an administrator.
//   - GitLab: GET /personal_access_tokens/self must list api; for each
//     project the token's user must be a Maintainer (GET /projects/:id, then
//     the inherited membership when the project's answer says less).
//
// Repos are deduplicated; a credential of a kind it does not know is
// Unverified.
func CheckCredentials(ctx context.Context, forge jobs.Forge, f Forge, repos []string) []CredentialCheck {
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	repos = slices.Compact(slices.Sorted(slices.Values(repos)))
	c := checker{forge: forge, repos: repos}
	switch api := f.API.(type) {
	case *GitHub:
		switch m := f.Minter.(type) {
		case *token.GitHubApp:
			c.gitHubApp(ctx, m)
		case token.Static:
			c.gitHubToken(ctx, api, m.Token)
		default:
			c.unverified("", "", "the GitHub credential is of a kind this check does not know")
		}
	case *Gitea:
		tok, err := f.Minter.Mint(ctx, "")
		if err != nil {
			c.fail("", nil, "FORGEJO_TOKEN is not set", "set FORGEJO_TOKEN (docs/forges.md)")
			break
		}
		c.gitea(ctx, api, tok)
	case *GitLab:
		m, ok := f.Minter.(*token.GitLabProject)
		if !ok {
			c.unverified("", "", "the GitLab credential is of a kind this check does not know")
			break
		}
		c.gitLab(ctx, m)
	default:
		c.unverified("", "", "this forge's credential cannot be checked")
	}
	return c.out
}

// checker collects one forge's findings.
type checker struct {
	forge jobs.Forge
	repos []string
	out   []CredentialCheck
}

func (c *checker) ok(repo, format string, args ...any) {
	c.out = append(c.out, CredentialCheck{Forge: c.forge, Repo: repo, OK: true, Detail: fmt.Sprintf(format, args...)})
}

func (c *checker) fail(repo string, missing []string, detail, fix string) {
	c.out = append(c.out, CredentialCheck{Forge: c.forge, Repo: repo, Missing: missing, Detail: detail, Fix: fix})
}

func (c *checker) unverified(repo, fix, format string, args ...any) {
	c.out = append(c.out, CredentialCheck{Forge: c.forge, Repo: repo, Unverified: true, Detail: fmt.Sprintf(format, args...), Fix: fix})
}

// unanswered records that the forge did not answer (or answered something
// the check cannot read) for repo ("": the credential) with err.
func (c *checker) unanswered(repo, what string, err error) {
	c.unverified(repo, "check that this host reaches the forge at its configured URL, then run the check again",
		"%s: not checked: %v", what, err)
}

// skipRepos records that no repository was checked, and why.
func (c *checker) skipRepos(why string) {
	for _, r := range c.repos {
		c.unverified(r, "", "%s not checked: %s", r, why)
	}
}

// ---- GitHub App ----

// ghRequired are the installation permissions publishing needs, each with
// the least level that serves.
var ghRequired = []struct {
	name, level string
	get         func(*github.InstallationPermissions) string
}{
	{"metadata", "read", func(p *github.InstallationPermissions) string { return p.GetMetadata() }},
	{"contents", "write", func(p *github.InstallationPermissions) string { return p.GetContents() }},
	{"issues", "write", func(p *github.InstallationPermissions) string { return p.GetIssues() }},
	{"pull requests", "write", func(p *github.InstallationPermissions) string { return p.GetPullRequests() }},
}

// ghLevel ranks a GitHub permission level.
func ghLevel(level string) int {
	return map[string]int{"read": 1, "write": 2, "admin": 3}[level]
}

func (c *checker) gitHubApp(ctx context.Context, app *token.GitHubApp) {
	what := fmt.Sprintf("GitHub App %d, installation %d", app.AppID, app.InstallationID)
	jwt, err := app.JWT()
	if err != nil {
		c.fail("", nil, what+": no App token: "+err.Error(), "set GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY_PATH (docs/forges.md)")
		c.skipRepos("the App has no token")
		return
	}
	client, err := token.NewGitHubClient(app.APIURL, app.HTTPClient, jwt)
	if err != nil {
		c.fail("", nil, what+": "+err.Error(), "fix GITHUB_API_URL")
		return
	}
	inst, resp, err := client.Apps.GetInstallation(ctx, app.InstallationID)
	if err != nil {
		err = token.ClassifyHTTP(resp, err)
		switch {
		case errors.Is(err, token.ErrRefused):
			c.fail("", nil, what+": GitHub refused the App's token: "+err.Error(),
				"check GITHUB_APP_ID and that GITHUB_APP_PRIVATE_KEY_PATH holds a current key of that App")
			c.skipRepos("GitHub refused the App")
		case errors.Is(err, token.ErrNoRepository):
			c.fail("", nil, what+": the App has no such installation",
				"set GITHUB_APP_INSTALLATION_ID to the id in the installation's settings URL (docs/forges.md)")
			c.skipRepos("the installation was not found")
		default:
			c.unanswered("", what, err)
			c.skipRepos("the installation could not be read")
		}
		return
	}
	if inst.SuspendedAt != nil {
		c.fail("", []string{"an active installation"}, what+": the installation is suspended",
			"unsuspend the App's installation in the account's settings")
	}
	perms := inst.GetPermissions()
	if perms == nil {
		perms = &github.InstallationPermissions{}
	}
	var missing, have []string
	for _, r := range ghRequired {
		got := r.get(perms)
		if ghLevel(got) < ghLevel(r.level) {
			missing = append(missing, r.name+": "+r.level)
			continue
		}
		have = append(have, r.name+": "+got)
	}
	account := inst.GetAccount().GetLogin()
	if len(missing) > 0 {
		c.fail("", missing, fmt.Sprintf("%s (%s) lacks %s", what, account, strings.Join(missing, ", ")),
			"grant them in the App's settings (Permissions), then accept the new permissions on the installation ("+PermissionsDoc+")")
	} else if inst.SuspendedAt == nil {
		c.ok("", "%s (%s) has %s", what, account, strings.Join(have, ", "))
	}

	// A token restricted to the repository and to reading its metadata
	// (which every installation has) proves the repository is included.
	probe := *app
	probe.Permissions = &github.InstallationPermissions{Metadata: github.Ptr("read")}
	for _, repo := range c.repos {
		owner, _, err := splitRepo(repo)
		if err != nil {
			c.fail(repo, nil, err.Error(), "fix the repository in the triggers file")
			continue
		}
		notInstalled := func() {
			c.fail(repo, []string{"installation on " + repo}, fmt.Sprintf("the App is not installed on %s (or it does not exist)", repo),
				"install the App on "+repo+" (the installation's Repository access)")
		}
		if account != "" && !strings.EqualFold(owner, account) {
			notInstalled()
			continue
		}
		tok, err := probe.Mint(ctx, repo)
		switch {
		case errors.Is(err, token.ErrNoRepository):
			notInstalled()
		case errors.Is(err, token.ErrRefused):
			c.fail(repo, nil, fmt.Sprintf("GitHub refused a token for %s: %v", repo, err), "check the App's installation")
		case err != nil:
			c.unanswered(repo, repo, err)
		default:
			_ = probe.Revoke(ctx, repo, tok)
			c.ok(repo, "installed on %s", repo)
		}
	}
}

// ---- GitHub token ----

func (c *checker) gitHubToken(ctx context.Context, api *GitHub, tok token.Token) {
	const what = "GITHUB_PAT"
	client, err := api.client(tok)
	if err != nil {
		c.fail("", nil, what+": "+err.Error(), "fix GITHUB_API_URL")
		return
	}
	u, resp, err := client.Users.Get(ctx, "")
	if err != nil {
		err = token.ClassifyHTTP(resp, err)
		if errors.Is(err, token.ErrRefused) {
			c.fail("", nil, what+": GitHub refused the token: "+err.Error(),
				"make a new token with the permissions of "+PermissionsDoc+" and set GITHUB_PAT")
			c.skipRepos("GitHub refused the token")
			return
		}
		c.unanswered("", what, err)
		c.skipRepos("GitHub did not answer")
		return
	}
	login := u.GetLogin()
	// A classic token's scopes come in X-OAuth-Scopes (empty when it has
	// none); a fine-grained token's answer has no such header.
	if vals, classic := resp.Header[http.CanonicalHeaderKey("X-OAuth-Scopes")]; classic {
		var scopes []string
		for _, v := range vals {
			for s := range strings.SplitSeq(v, ",") {
				if s = strings.TrimSpace(s); s != "" {
					scopes = append(scopes, s)
				}
			}
		}
		if slices.Contains(scopes, "repo") {
			c.ok("", "%s: a classic token of %s with the repo scope", what, login)
		} else {
			c.fail("", []string{"repo"}, fmt.Sprintf("%s: a classic token of %s without the repo scope (it has %s)", what, login, orNone(scopes)),
				"give the token the repo scope, or use a fine-grained token ("+PermissionsDoc+")")
		}
	} else {
		c.unverified("", "check in the token's settings that it has Metadata: read and Contents, Issues and Pull requests: read and write on the repositories ("+PermissionsDoc+")",
			"%s: a fine-grained token of %s: GitHub does not tell its permissions, so they were not checked", what, login)
	}
	for _, repo := range c.repos {
		owner, name, err := splitRepo(repo)
		if err != nil {
			c.fail(repo, nil, err.Error(), "fix the repository in the triggers file")
			continue
		}
		r, resp, err := client.Repositories.Get(ctx, owner, name)
		if err != nil {
			err = token.ClassifyHTTP(resp, err)
			if errors.Is(err, token.ErrNoRepository) || errors.Is(err, token.ErrRefused) {
				c.fail(repo, []string{"access to " + repo}, fmt.Sprintf("%s cannot read %s: %v", what, repo, err),
					"give the token access to "+repo+", and "+login+" Write on it")
				continue
			}
			c.unanswered(repo, repo, err)
			continue
		}
		if !r.GetPermissions().GetPush() {
			c.fail(repo, []string{"Write on " + repo}, fmt.Sprintf("%s may not push to %s", login, repo),
				"make "+login+" a collaborator with Write on "+repo)
			continue
		}
		c.ok(repo, "%s may push to %s", login, repo)
	}
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
}

// ---- Forgejo / Gitea ----

// giteaScopes are the scopes docs/forges.md asks of a Forgejo or Gitea token.
var giteaScopes = []string{"read:user", "write:issue", "write:repository"}

// giteaScopeRE finds the scopes Gitea's 403 says a token lacks: "token does
// not have at least one of required scope(s): [write:issue]" (Forgejo) or
// "..., required=[write:issue], token scope=..." (Gitea).
var giteaScopeRE = regexp.MustCompile(`required scope\(s\)[^\[]*\[([^\]]*)\]`)

// giteaMissingScopes answers the scopes a Gitea 403 message names, nil when
// it names none.
func giteaMissingScopes(msg string) []string {
	m := giteaScopeRE.FindStringSubmatch(msg)
	if m == nil {
		return nil
	}
	return strings.FieldsFunc(m[1], func(r rune) bool { return r == ' ' || r == ',' })
}

func (c *checker) gitea(ctx context.Context, api *Gitea, tok token.Token) {
	const what = "FORGEJO_TOKEN"
	client, err := api.client(ctx, tok)
	if err != nil {
		c.fail("", nil, what+": "+err.Error(), "fix FORGEJO_URL")
		return
	}
	var missing []string
	login := ""
	u, resp, err := client.GetMyUserInfo()
	switch {
	case err == nil:
		login = u.UserName
	case resp != nil && resp.StatusCode == http.StatusUnauthorized:
		c.fail("", nil, what+": the forge refused the token: "+err.Error(),
			"make a new token with "+strings.Join(giteaScopes, ", ")+" and set FORGEJO_TOKEN")
		c.skipRepos("the forge refused the token")
		return
	case resp != nil && resp.StatusCode == http.StatusForbidden && giteaMissingScopes(err.Error()) != nil:
		missing = append(missing, giteaMissingScopes(err.Error())...)
	default:
		c.unanswered("", what, giteaErr(resp, err))
		c.skipRepos("the forge did not answer")
		return
	}

	// write:issue and write:repository, proven on a repository that does
	// not exist: nothing is written.
	owner := login
	if len(c.repos) > 0 {
		owner, _, _ = strings.Cut(c.repos[0], "/")
	}
	if owner == "" {
		owner = "pidispatch"
	}
	probe := "pidispatch-scope-probe-" + randomHex(6)
	unknown := ""
	for _, p := range []struct{ scope, route string }{
		{"write:issue", "issues"},
		{"write:repository", "pulls"},
	} {
		lacks, err := api.scopeProbe(ctx, tok, owner, probe, p.route)
		switch {
		case errors.Is(err, token.ErrRefused):
			c.fail("", nil, what+": the forge refused the token: "+err.Error(),
				"make a new token with "+strings.Join(giteaScopes, ", ")+" and set FORGEJO_TOKEN")
			c.skipRepos("the forge refused the token")
			return
		case err != nil:
			unknown = fmt.Sprintf("%s not verified: %v", p.scope, err)
		default:
			missing = append(missing, lacks...)
		}
	}
	missing = slices.Compact(slices.Sorted(slices.Values(missing)))
	who := what
	if login != "" {
		who = fmt.Sprintf("%s (%s)", what, login)
	}
	switch {
	case len(missing) > 0:
		c.fail("", missing, fmt.Sprintf("%s lacks the scope %s", who, strings.Join(missing, ", ")),
			"make a new token with "+strings.Join(giteaScopes, ", ")+" and set FORGEJO_TOKEN ("+PermissionsDoc+")")
	case unknown != "":
		c.unverified("", "check that this host reaches the forge at its configured URL, then run the check again", "%s: %s", who, unknown)
	default:
		c.ok("", "%s has %s", who, strings.Join(giteaScopes, ", "))
	}

	bot := login
	if bot == "" {
		bot = "the token's user"
	}
	for _, repo := range c.repos {
		o, n, err := splitRepo(repo)
		if err != nil {
			c.fail(repo, nil, err.Error(), "fix the repository in the triggers file")
			continue
		}
		r, resp, err := client.GetRepo(o, n)
		if err != nil {
			if scopes := giteaMissingScopes(err.Error()); resp != nil && resp.StatusCode == http.StatusForbidden && scopes != nil {
				c.fail(repo, scopes, fmt.Sprintf("%s cannot read %s: it lacks the scope %s", what, repo, strings.Join(scopes, ", ")),
					"make a new token with "+strings.Join(giteaScopes, ", ")+" and set FORGEJO_TOKEN")
				continue
			}
			err = giteaErr(resp, err)
			if errors.Is(err, token.ErrNoRepository) || errors.Is(err, token.ErrRefused) {
				c.fail(repo, []string{"Administrator on " + repo}, fmt.Sprintf("%s cannot read %s: %v", bot, repo, err),
					"add "+bot+" to "+repo+" as a collaborator with Administrator")
				continue
			}
			c.unanswered(repo, repo, err)
			continue
		}
		if r.Permissions == nil || !r.Permissions.Admin {
			role := "Read"
			switch {
			case r.Permissions == nil || !r.Permissions.Pull:
				role = "no role"
			case r.Permissions.Push:
				role = "Write"
			}
			c.fail(repo, []string{"Administrator on " + repo},
				fmt.Sprintf("the bot %s needs Administrator on %s to read collaborators' permissions (it has %s)", bot, repo, role),
				"make "+bot+" a collaborator with Administrator on "+repo+" ("+PermissionsDoc+")")
			continue
		}
		c.ok(repo, "%s is Administrator on %s", bot, repo)
	}
}

// scopeProbe posts an empty object to route of owner/name, a repository that
// does not exist, and answers the scopes the forge says tok lacks for it
// (none: it answered 404, the scope check passed). An answer it cannot read
// is an error.
func (g *Gitea) scopeProbe(ctx context.Context, tok token.Token, owner, name, route string) ([]string, error) {
	u := fmt.Sprintf("%s/api/v1/repos/%s/%s/%s", strings.TrimSuffix(g.URL, "/"), url.PathEscape(owner), url.PathEscape(name), route)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader("{}"))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "token "+tok.Reveal())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	hc := g.HTTPClient
	if hc == nil {
		hc = token.NoRedirectClient()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", token.ErrUnavailable, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Message string `json:"message"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = json.Unmarshal(raw, &body)
	switch resp.StatusCode {
	case http.StatusNotFound:
		return nil, nil
	case http.StatusForbidden:
		if scopes := giteaMissingScopes(body.Message); scopes != nil {
			return scopes, nil
		}
	}
	return nil, token.ClassifyStatus(resp.StatusCode, fmt.Errorf("POST %s: %s: %s", route, resp.Status, body.Message))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ---- GitLab ----

// glRoles names GitLab's access levels.
var glRoles = map[gitlab.AccessLevelValue]string{
	gitlab.NoPermissions: "no role", gitlab.MinimalAccessPermissions: "Minimal Access", gitlab.GuestPermissions: "Guest",
	gitlab.PlannerPermissions: "Planner", gitlab.ReporterPermissions: "Reporter", gitlab.DeveloperPermissions: "Developer",
	gitlab.MaintainerPermissions: "Maintainer", gitlab.OwnerPermissions: "Owner",
}

func glRole(l gitlab.AccessLevelValue) string {
	if r, ok := glRoles[l]; ok {
		return r
	}
	return fmt.Sprintf("access level %d", l)
}

func (c *checker) gitLab(ctx context.Context, m *token.GitLabProject) {
	const what = "GITLAB_TOKEN"
	client, err := NewGitLabClient(m.URL, m.HTTPClient, m.Parent)
	if err != nil {
		c.fail("", nil, what+": "+err.Error(), "fix GITLAB_URL")
		return
	}
	refused := func(err error) {
		c.fail("", nil, what+": GitLab refused the token (revoked, expired or mistyped): "+err.Error(),
			"make a new token with the api scope and set GITLAB_TOKEN ("+PermissionsDoc+")")
		c.skipRepos("GitLab refused the token")
	}
	pat, resp, err := client.PersonalAccessTokens.GetSinglePersonalAccessToken(gitlab.WithContext(ctx))
	var userID int64
	switch {
	case err == nil && (pat.Revoked || !pat.Active):
		refused(errors.New("the token is not active"))
		return
	case err == nil:
		userID = pat.UserID
		if slices.Contains(pat.Scopes, "api") {
			c.ok("", "%s has the api scope", what)
		} else {
			c.fail("", []string{"api"}, fmt.Sprintf("%s lacks the scope api (it has %s)", what, orNone(pat.Scopes)),
				"make a new token with the api scope and set GITLAB_TOKEN ("+PermissionsDoc+")")
		}
	case resp != nil && resp.StatusCode == http.StatusUnauthorized:
		refused(err)
		return
	case resp != nil && resp.StatusCode == http.StatusForbidden:
		// GitLab answers a token without api (nor read_api) 403 insufficient_scope.
		c.fail("", []string{"api"}, what+" may not read its own scopes: it lacks the scope api",
			"make a new token with the api scope and set GITLAB_TOKEN ("+PermissionsDoc+")")
	default:
		c.unanswered("", what+"'s scopes", gitlabErr(resp, err))
	}

	admin := -1 // unknown; 0 no, 1 yes
	isAdmin := func() bool {
		if admin < 0 {
			admin = 0
			if u, _, err := client.Users.CurrentUser(gitlab.WithContext(ctx)); err == nil {
				if u.IsAdmin {
					admin = 1
				}
				if userID == 0 {
					userID = u.ID
				}
			}
		}
		return admin == 1
	}
	for _, repo := range c.repos {
		p, resp, err := client.Projects.GetProject(repo, nil, gitlab.WithContext(ctx))
		if err != nil {
			err = gitlabErr(resp, err)
			if errors.Is(err, token.ErrNoRepository) || errors.Is(err, token.ErrRefused) {
				c.fail(repo, []string{"Maintainer of " + repo}, fmt.Sprintf("%s cannot read %s: %v", what, repo, err),
					"make the token's user a Maintainer of "+repo)
				continue
			}
			c.unanswered(repo, repo, err)
			continue
		}
		level := gitlab.NoPermissions
		if p.Permissions != nil {
			if pa := p.Permissions.ProjectAccess; pa != nil {
				level = max(level, pa.AccessLevel)
			}
			if ga := p.Permissions.GroupAccess; ga != nil {
				level = max(level, ga.AccessLevel)
			}
		}
		if level < gitlab.MaintainerPermissions {
			if userID == 0 {
				isAdmin() // learns the token's user
			}
			// The project's answer may leave out a role inherited from a
			// parent group: the inherited membership says it.
			if userID != 0 {
				if mem, _, err := client.ProjectMembers.GetInheritedProjectMember(repo, userID, gitlab.WithContext(ctx)); err == nil {
					level = max(level, mem.AccessLevel)
				}
			}
		}
		switch {
		case level >= gitlab.MaintainerPermissions:
			c.ok(repo, "%s of %s", glRole(level), repo)
		case isAdmin():
			c.ok(repo, "an administrator of the instance, so Maintainer of %s", repo)
		default:
			c.fail(repo, []string{"Maintainer of " + repo},
				fmt.Sprintf("the token's user is %s of %s: only a Maintainer creates the job's project access token", glRole(level), repo),
				"make the token's user a Maintainer of "+repo+" ("+PermissionsDoc+")")
		}
	}
}
