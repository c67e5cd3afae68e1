package forgetest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v84/github"
)

// GitHub is a double of GitHub's REST API, in go-github's types, for one App
// installation whose repositories live on a GitServer. It mints installation
// tokens (checking the App's RS256 JWT), answers repositories, branches, pull
// requests and comments, and what a job's event is read from (issues, their
// comments and events, reviews, changed files: github_event.go), and can be
// told to fail.
type GitHub struct {
	URL string

	t      testing.TB
	git    *GitServer
	appID  int64
	key    *rsa.PublicKey
	mu     sync.Mutex
	now    func() time.Time
	ttl    time.Duration
	tokens map[string]issued
	repos  map[string]*ghRepo
	faults []fault
	// Minted lists every mint request's repositories and permissions.
	minted  []MintRequest
	revoked []string
	// Calls counts requests by "METHOD path".
	calls map[string]int
	// perms are people's permissions by "owner/name/login".
	perms map[string]string
	// ids numbers what the double makes (comments, events, reviews).
	ids int64
	// edits counts the comment edits answered.
	edits int
	// install and pats are what the credential checks read (github_check.go).
	install ghInstall
	pats    map[string]ghPAT
	// cloneURLs are the clone URLs SetCloneURL put in place of CloneURL.
	cloneURLs map[string]string
}

// AppSlug is the double's App's slug; its bot user is AppSlug+"[bot]" with
// id AppBotID.
const (
	AppSlug  = "pi-dispatch-test"
	AppBotID = 41898282
)

// MintRequest is what one installation-token request asked for.
type MintRequest struct {
	Repositories []string
	Permissions  *github.InstallationPermissions
}

type issued struct {
	repos   []string
	expires time.Time
	perms   *github.InstallationPermissions // what it was minted with; nil: the installation's
}

type ghRepo struct {
	id            int64 // the repository's id, which a rename keeps
	defaultBranch string
	protected     map[string]bool
	pulls         []*github.PullRequest
	comments      map[int][]string
	commentIDs    map[int][]int64 // the id of each of comments, in order
	gone          bool
	// What an event is read from (github_event.go).
	issues  map[int]*ghIssue
	reviews map[int64]*ghReview
	files   map[int][]*github.CommitFile
	// What the host posted of a job's outputs (github_publish.go).
	posted  []PostedReview
	replies []PostedReply
}

type fault struct {
	method, path string // path prefix
	status       int
	times        int
	after        bool   // do the work, then answer status
	retryAfter   string // the Retry-After header answered with it
}

// StartGitHub starts the double. Installation tokens it mints live ttl and
// open the git server to the repositories they name.
func StartGitHub(t testing.TB, git *GitServer, appID int64, key *rsa.PublicKey, ttl time.Duration) *GitHub {
	t.Helper()
	g := &GitHub{t: t, git: git, appID: appID, key: key, now: time.Now, ttl: ttl,
		tokens: map[string]issued{}, repos: map[string]*ghRepo{}, calls: map[string]int{}, perms: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /app/installations/{id}/access_tokens", g.mint)
	mux.HandleFunc("DELETE /installation/token", g.revoke)
	mux.HandleFunc("GET /repos/{owner}/{name}", g.repo)
	mux.HandleFunc("GET /repos/{owner}/{name}/branches/{branch...}", g.branch)
	mux.HandleFunc("GET /repos/{owner}/{name}/pulls", g.listPulls)
	mux.HandleFunc("POST /repos/{owner}/{name}/pulls", g.createPull)
	mux.HandleFunc("GET /repos/{owner}/{name}/pulls/{n}", g.getPull)
	mux.HandleFunc("POST /repos/{owner}/{name}/issues/{n}/comments", g.comment)
	mux.HandleFunc("PATCH /repos/{owner}/{name}/issues/comments/{id}", g.editComment)
	mux.HandleFunc("GET /app", g.app)
	mux.HandleFunc("GET /users/{login}", g.user)
	mux.HandleFunc("GET /repos/{owner}/{name}/collaborators/{user}/permission", g.permission)
	g.eventRoutes(mux)
	g.publishRoutes(mux)
	g.checkRoutes(mux)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isGitPath(r.URL.Path) {
			// git is served where the API is, as a forge serves it.
			git.ServeHTTP(w, r)
			return
		}
		g.mu.Lock()
		g.calls[r.Method+" "+r.URL.Path]++
		var after *fault
		for i := range g.faults {
			f := &g.faults[i]
			if f.times > 0 && f.method == r.Method && strings.HasPrefix(r.URL.Path, f.path) {
				f.times--
				if !f.after {
					g.mu.Unlock()
					if f.retryAfter != "" {
						w.Header().Set("Retry-After", f.retryAfter)
					}
					writeJSON(w, f.status, github.ErrorResponse{Message: http.StatusText(f.status)})
					return
				}
				after = f
				break
			}
		}
		g.mu.Unlock()
		if after != nil {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, r)
			writeJSON(w, after.status, github.ErrorResponse{Message: http.StatusText(after.status)})
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	g.URL = srv.URL + "/"
	git.SetAllow(func(_, password string) bool { return g.validToken(password, "") })
	return g
}

// CloneURL is repo's URL on the double's own address, where it serves the
// GitServer's repositories.
func (g *GitHub) CloneURL(repo string) string {
	return strings.TrimSuffix(g.URL, "/") + "/" + repo + ".git"
}

// SetCloneURL makes the double answer url as repo's clone URL, as a forge
// that was tampered with, or that sits behind another host, would.
func (g *GitHub) SetCloneURL(repo, url string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cloneURLs == nil {
		g.cloneURLs = map[string]string{}
	}
	g.cloneURLs[repo] = url
}

func (g *GitHub) answeredCloneURL(repo string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if u, ok := g.cloneURLs[repo]; ok {
		return u
	}
	return g.CloneURL(repo)
}

// SetPermission gives login the permission (admin, maintain, write,
// triage, read or none) on repo.
func (g *GitHub) SetPermission(repo, login, permission string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.perms[repo+"/"+login] = permission
}

// app answers GET /app for the App's JWT only.
func (g *GitHub) app(w http.ResponseWriter, r *http.Request) {
	if !g.checkJWT(r.Header.Get("Authorization")) {
		writeJSON(w, http.StatusUnauthorized, github.ErrorResponse{Message: "A JSON web token could not be decoded"})
		return
	}
	writeJSON(w, http.StatusOK, github.App{ID: github.Ptr(g.appID), Slug: github.Ptr(AppSlug), Name: github.Ptr(AppSlug)})
}

// user answers GET /users/{login} for the App's bot.
func (g *GitHub) user(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("login") != AppSlug+"[bot]" {
		writeJSON(w, http.StatusNotFound, github.ErrorResponse{Message: "Not Found"})
		return
	}
	writeJSON(w, http.StatusOK, github.User{ID: github.Ptr(int64(AppBotID)), Login: github.Ptr(AppSlug + "[bot]"), Type: github.Ptr("Bot")})
}

// permission answers a collaborator's permission, for a token of the repository.
func (g *GitHub) permission(w http.ResponseWriter, r *http.Request) {
	_, repo, ok := g.authRepo(w, r)
	if !ok {
		return
	}
	login := r.PathValue("user")
	g.mu.Lock()
	p, known := g.perms[repo+"/"+login]
	g.mu.Unlock()
	if !known {
		p = "none"
	}
	// As GitHub answers: the role's name, and the permission it grants of
	// the older three (maintain is write, triage is read).
	permission := map[string]string{"maintain": "write", "triage": "read"}[p]
	if permission == "" {
		permission = p
	}
	writeJSON(w, http.StatusOK, github.RepositoryPermissionLevel{Permission: github.Ptr(permission), RoleName: github.Ptr(p),
		User: &github.User{Login: github.Ptr(login)}})
}

// SetClock sets the double's clock (token expiry).
func (g *GitHub) SetClock(now func() time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now = now
}

// AddRepo declares repo (already on the git server) with its default branch.
func (g *GitHub) AddRepo(repo, defaultBranch string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.repos[repo] = &ghRepo{id: ghRepoIDBase + int64(len(g.repos)), defaultBranch: defaultBranch, protected: map[string]bool{defaultBranch: true}, comments: map[int][]string{}, commentIDs: map[int][]int64{},
		issues: map[int]*ghIssue{}, reviews: map[int64]*ghReview{}, files: map[int][]*github.CommitFile{}}
}

// ghRepoIDBase is the id of the first repository AddRepo declares; the
// next ones follow it.
const ghRepoIDBase = 1296269

// RepoID is repo's id, as the API answers it.
func (g *GitHub) RepoID(repo string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.repos[repo].id
}

// SetRepoID makes repo answer id: the name now held by another repository,
// as after the first was renamed or transferred and a new one created under
// its old name.
func (g *GitHub) SetRepoID(repo string, id int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.repos[repo].id = id
}

// Protect marks branch of repo protected.
func (g *GitHub) Protect(repo, branch string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.repos[repo].protected[branch] = true
}

// Vanish makes repo answer 404 from now on (API and git).
func (g *GitHub) Vanish(repo string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.repos[repo].gone = true
}

// Fail answers the next times requests of method to a path starting with
// prefix with status; with after, the request is carried out first (a forge
// that did the work and then failed to say so).
func (g *GitHub) Fail(method, prefix string, status, times int, after bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.faults = append(g.faults, fault{method: method, path: prefix, status: status, times: times, after: after})
}

// FailRetryAfter answers the next times requests of method under prefix
// with status and a Retry-After header of retryAfter.
func (g *GitHub) FailRetryAfter(method, prefix string, status, times int, retryAfter string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.faults = append(g.faults, fault{method: method, path: prefix, status: status, times: times, retryAfter: retryAfter})
}

// ExpireTokens makes every token minted so far expired.
func (g *GitHub) ExpireTokens() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, v := range g.tokens {
		v.expires = time.Time{}
		g.tokens[k] = v
	}
}

// Tokens are every installation token minted, revoked ones included.
func (g *GitHub) Tokens() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.tokens)+len(g.revoked))
	for k := range g.tokens {
		out = append(out, k)
	}
	return append(out, g.revoked...)
}

// Mints are the mint requests received.
func (g *GitHub) Mints() []MintRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]MintRequest(nil), g.minted...)
}

// Pulls are repo's pull requests.
func (g *GitHub) Pulls(repo string) []*github.PullRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*github.PullRequest(nil), g.repos[repo].pulls...)
}

// Comments are the comments the host wrote on issue n of repo, in order,
// each as it reads now (edited in place where the host edited it).
func (g *GitHub) Comments(repo string, n int) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.repos[repo].comments[n]...)
}

// Calls counts the requests of "METHOD path".
func (g *GitHub) Calls(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[key]
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// validToken: minted, not expired, and (when repo is given) for repo.
func (g *GitHub) validToken(tok, repo string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.pats[tok]; ok {
		return true // a personal token reaches every repository
	}
	it, ok := g.tokens[tok]
	if !ok || !g.now().Before(it.expires) {
		return false
	}
	if repo == "" {
		return true
	}
	_, name, _ := strings.Cut(repo, "/")
	for _, r := range it.repos {
		if r == name {
			return true
		}
	}
	return false
}

// authRepo checks the bearer token and the repository; it answers for the
// caller and reports false when it did.
func (g *GitHub) authRepo(w http.ResponseWriter, r *http.Request) (*ghRepo, string, bool) {
	repo := r.PathValue("owner") + "/" + r.PathValue("name")
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !g.validToken(tok, "") {
		writeJSON(w, http.StatusUnauthorized, github.ErrorResponse{Message: "Bad credentials"})
		return nil, "", false
	}
	g.mu.Lock()
	rp := g.repos[repo]
	g.mu.Unlock()
	if rp == nil || rp.gone || !g.validToken(tok, repo) {
		writeJSON(w, http.StatusNotFound, github.ErrorResponse{Message: "Not Found"})
		return nil, "", false
	}
	return rp, repo, true
}

func (g *GitHub) mint(w http.ResponseWriter, r *http.Request) {
	if !g.checkJWT(r.Header.Get("Authorization")) {
		writeJSON(w, http.StatusUnauthorized, github.ErrorResponse{Message: "A JSON web token could not be decoded"})
		return
	}
	var opts github.InstallationTokenOptions
	if err := json.NewDecoder(r.Body).Decode(&opts); err != nil || len(opts.Repositories) == 0 {
		writeJSON(w, http.StatusUnprocessableEntity, github.ErrorResponse{Message: "repositories required"})
		return
	}
	if msg := g.refuseMint(opts); msg != "" {
		writeJSON(w, http.StatusUnprocessableEntity, github.ErrorResponse{Message: msg})
		return
	}
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	tok := "ghs_" + hex.EncodeToString(b)
	g.mu.Lock()
	exp := g.now().Add(g.ttl)
	g.tokens[tok] = issued{repos: opts.Repositories, expires: exp, perms: opts.Permissions}
	g.minted = append(g.minted, MintRequest{Repositories: opts.Repositories, Permissions: opts.Permissions})
	g.mu.Unlock()
	writeJSON(w, http.StatusCreated, github.InstallationToken{Token: github.Ptr(tok), ExpiresAt: &github.Timestamp{Time: exp}})
}

func (g *GitHub) checkJWT(h string) bool {
	jwt, ok := strings.CutPrefix(h, "Bearer ")
	parts := strings.Split(jwt, ".")
	if !ok || len(parts) != 3 {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return false
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(g.key, crypto.SHA256, sum[:], sig) != nil {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	var claims struct {
		Iss string `json:"iss"`
		Exp int64  `json:"exp"`
		Iat int64  `json:"iat"`
	}
	if json.Unmarshal(raw, &claims) != nil || claims.Iss != strconv.FormatInt(g.appID, 10) {
		return false
	}
	g.mu.Lock()
	now := g.now().Unix()
	g.mu.Unlock()
	return claims.Iat <= now && now < claims.Exp && claims.Exp-claims.Iat <= 600
}

func (g *GitHub) revoke(w http.ResponseWriter, r *http.Request) {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !g.validToken(tok, "") {
		writeJSON(w, http.StatusUnauthorized, github.ErrorResponse{Message: "Bad credentials"})
		return
	}
	g.mu.Lock()
	delete(g.tokens, tok)
	g.revoked = append(g.revoked, tok)
	g.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// Revoked are the tokens revoked, in order.
func (g *GitHub) Revoked() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.revoked...)
}

func (g *GitHub) repo(w http.ResponseWriter, r *http.Request) {
	rp, repo, ok := g.authRepo(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, github.Repository{
		ID:            github.Ptr(rp.id),
		FullName:      github.Ptr(repo),
		CloneURL:      github.Ptr(g.answeredCloneURL(repo)),
		DefaultBranch: github.Ptr(rp.defaultBranch),
		HTMLURL:       github.Ptr(g.URL + repo),
		Permissions:   g.patPermissions(r, repo),
	})
}

func (g *GitHub) branch(w http.ResponseWriter, r *http.Request) {
	rp, repo, ok := g.authRepo(w, r)
	if !ok {
		return
	}
	b := r.PathValue("branch")
	sha := g.git.Head(g.t, repo, b)
	g.mu.Lock()
	protected := rp.protected[b]
	g.mu.Unlock()
	if sha == "" && !protected {
		writeJSON(w, http.StatusNotFound, github.ErrorResponse{Message: "Branch not found"})
		return
	}
	writeJSON(w, http.StatusOK, github.Branch{Name: github.Ptr(b), Protected: github.Ptr(protected),
		Commit: &github.RepositoryCommit{SHA: github.Ptr(sha)}})
}

func (g *GitHub) listPulls(w http.ResponseWriter, r *http.Request) {
	rp, repo, ok := g.authRepo(w, r)
	if !ok {
		return
	}
	owner := r.PathValue("owner")
	head := r.URL.Query().Get("head")
	var out []*github.PullRequest
	g.mu.Lock()
	for _, pr := range rp.pulls {
		g.refreshPull(repo, pr)
		if pr.GetState() == "open" && (head == "" || head == owner+":"+pr.GetHead().GetRef()) {
			out = append(out, pr)
		}
	}
	g.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (g *GitHub) createPull(w http.ResponseWriter, r *http.Request) {
	rp, repo, ok := g.authRepo(w, r)
	if !ok {
		return
	}
	var np github.NewPullRequest
	if err := json.NewDecoder(r.Body).Decode(&np); err != nil || np.GetHead() == "" || np.GetBase() == "" {
		writeJSON(w, http.StatusUnprocessableEntity, github.ErrorResponse{Message: "Validation Failed"})
		return
	}
	sha := g.git.Head(g.t, repo, np.GetHead())
	if sha == "" {
		writeJSON(w, http.StatusUnprocessableEntity, github.ErrorResponse{Message: "head does not exist"})
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, pr := range rp.pulls {
		if pr.GetState() == "open" && pr.GetHead().GetRef() == np.GetHead() {
			writeJSON(w, http.StatusUnprocessableEntity, github.ErrorResponse{Message: "A pull request already exists"})
			return
		}
	}
	n := len(rp.pulls) + 1000
	pr := &github.PullRequest{
		Number: github.Ptr(n), State: github.Ptr("open"), Title: np.Title, Body: np.Body, Draft: np.Draft, User: appBot(),
		HTMLURL: github.Ptr(fmt.Sprintf("%s%s/pull/%d", strings.TrimSuffix(g.URL, "/")+"/", repo, n)),
		Head:    &github.PullRequestBranch{Ref: np.Head, SHA: github.Ptr(sha), Repo: &github.Repository{FullName: github.Ptr(repo)}},
		Base:    &github.PullRequestBranch{Ref: np.Base},
	}
	rp.pulls = append(rp.pulls, pr)
	_ = gitCmd(g.git.Dir(repo), "update-ref", fmt.Sprintf("refs/pull/%d/head", n), sha).Run()
	writeJSON(w, http.StatusCreated, pr)
}

func (g *GitHub) getPull(w http.ResponseWriter, r *http.Request) {
	rp, repo, ok := g.authRepo(w, r)
	if !ok {
		return
	}
	n, _ := strconv.Atoi(r.PathValue("n"))
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, pr := range rp.pulls {
		if pr.GetNumber() == n {
			g.refreshPull(repo, pr)
			writeJSON(w, http.StatusOK, pr)
			return
		}
	}
	writeJSON(w, http.StatusNotFound, github.ErrorResponse{Message: "Not Found"})
}

// mayWriteComments answers, as GitHub does, 403 to an installation token
// minted without issues or pull requests: write, and reports false when it
// did.
func (g *GitHub) mayWriteComments(w http.ResponseWriter, r *http.Request) bool {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	g.mu.Lock()
	it, ok := g.tokens[tok]
	g.mu.Unlock()
	if !ok || it.perms == nil || it.perms.GetIssues() == "write" || it.perms.GetPullRequests() == "write" {
		return true
	}
	writeJSON(w, http.StatusForbidden, github.ErrorResponse{Message: "Resource not accessible by integration"})
	return false
}

func (g *GitHub) comment(w http.ResponseWriter, r *http.Request) {
	rp, _, ok := g.authRepo(w, r)
	if !ok || !g.mayWriteComments(w, r) {
		return
	}
	n, _ := strconv.Atoi(r.PathValue("n"))
	var c github.IssueComment
	if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, github.ErrorResponse{Message: "Validation Failed"})
		return
	}
	g.mu.Lock()
	rp.comments[n] = append(rp.comments[n], c.GetBody())
	posted := g.addComment(rp, n, AppSlug+"[bot]", c.GetBody())
	rp.commentIDs[n] = append(rp.commentIDs[n], posted.GetID())
	g.mu.Unlock()
	writeJSON(w, http.StatusCreated, posted)
}

// editComment answers PATCH issues/comments/{id}: the host may edit the
// comments it wrote, as GitHub lets a bot edit its own (an App with
// issues:write may edit anyone's; the host never tries).
func (g *GitHub) editComment(w http.ResponseWriter, r *http.Request) {
	rp, _, ok := g.authRepo(w, r)
	if !ok || !g.mayWriteComments(w, r) {
		return
	}
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	var c github.IssueComment
	if err := json.NewDecoder(r.Body).Decode(&c); err != nil || c.Body == nil {
		writeJSON(w, http.StatusUnprocessableEntity, github.ErrorResponse{Message: "Validation Failed"})
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.edits++
	for n, is := range rp.issues {
		for _, cm := range is.thread {
			if cm.GetID() != id {
				continue
			}
			cm.Body = c.Body
			for i, posted := range rp.commentIDs[n] {
				if posted == id {
					rp.comments[n][i] = c.GetBody()
				}
			}
			writeJSON(w, http.StatusOK, cm)
			return
		}
	}
	writeJSON(w, http.StatusNotFound, github.ErrorResponse{Message: "Not Found"})
}

// CommentEdits counts the comment edits the double answered.
func (g *GitHub) CommentEdits() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.edits
}

// OpenPull opens a pull request from head to base of repo (both branches of
// it) as a person would, with its refs/pull/<n>/head ref, and returns its number.
func (g *GitHub) OpenPull(t testing.TB, repo, head, base string) int {
	t.Helper()
	sha := g.git.Head(t, repo, head)
	if sha == "" {
		t.Fatalf("no branch %s in %s", head, repo)
	}
	g.mu.Lock()
	rp := g.repos[repo]
	n := len(rp.pulls) + 1000
	rp.pulls = append(rp.pulls, &github.PullRequest{
		Number: github.Ptr(n), State: github.Ptr("open"), Title: github.Ptr("a person's change"),
		HTMLURL: github.Ptr(fmt.Sprintf("%s%s/pull/%d", g.URL, repo, n)),
		Head:    &github.PullRequestBranch{Ref: github.Ptr(head), SHA: github.Ptr(sha), Repo: &github.Repository{FullName: github.Ptr(repo)}},
		Base:    &github.PullRequestBranch{Ref: github.Ptr(base)},
	})
	g.mu.Unlock()
	Git(t, g.git.Dir(repo), "update-ref", fmt.Sprintf("refs/pull/%d/head", n), sha)
	return n
}
