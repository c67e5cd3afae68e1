package forgetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	gitlab "gitlab.com/gitlab-org/api/client-go/v2"
)

// GitLab is a double of GitLab's REST API (v4), in client-go's types, whose
// projects live on a GitServer. Parent is the host's token: it may create
// project access tokens, which open the git server and the API to their
// project. What a job's event is read from is in gitlab_event.go.
type GitLab struct {
	URL    string
	Parent string

	t         testing.TB
	git       *GitServer
	mu        sync.Mutex
	projects  map[string]*glProject
	tokens    map[string]string // token -> project
	ids       map[int64]string  // token id -> token
	revoked   []string
	minted    []gitlab.CreateProjectAccessTokenOptions
	users     map[string]int64 // login -> id
	bots      map[int64]bool   // the ids of project bot users
	seq       int64            // numbers notes and events
	noteEdits int
	// noteEditsRefused counts the edits answered 403.
	noteEditsRefused int
	faults           []fault
	calls            map[string]int // "METHOD sub"
	// parentScopes are the parent token's scopes (gitlab_check.go).
	parentScopes *[]string
}

type glProject struct {
	id            int64
	repo          string
	defaultBranch string
	protected     []string
	mrs           []*gitlab.MergeRequest
	notes         map[string][]string // "issue/N" or "mr/N"
	noteIDs       map[string][]int64  // the id of each of notes, in order
	threads       map[string]*glThread
	members       map[int64]gitlab.AccessLevelValue
	// What the host posted of a job's outputs (gitlab_publish.go).
	discussions map[int64]glDiscussions
	approved    map[int64]bool
	actions     []QuickAction
}

// StartGitLab starts the double.
func StartGitLab(t testing.TB, git *GitServer) *GitLab {
	t.Helper()
	g := &GitLab{t: t, git: git, Parent: "glpat-parent-" + randHex(8), projects: map[string]*glProject{}, tokens: map[string]string{}, ids: map[int64]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isGitPath(r.URL.Path) {
			// git is served where the API is, as a forge serves it.
			git.ServeHTTP(w, r)
			return
		}
		g.serve(w, r)
	}))
	t.Cleanup(srv.Close)
	g.URL = srv.URL
	git.SetAllow(func(_, password string) bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		_, ok := g.tokens[password]
		return ok || password == g.Parent
	})
	return g
}

// CloneURL is repo's URL on the double's own address, where it serves the
// GitServer's repositories.
func (g *GitLab) CloneURL(repo string) string { return g.URL + "/" + repo + ".git" }

// AddProject declares a project (already on the git server).
func (g *GitLab) AddProject(repo, defaultBranch string, protected ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.projects[repo] = &glProject{id: int64(len(g.projects) + 1), repo: repo, defaultBranch: defaultBranch,
		protected: append([]string{defaultBranch}, protected...), notes: map[string][]string{}, noteIDs: map[string][]int64{},
		threads: map[string]*glThread{}, members: map[int64]gitlab.AccessLevelValue{},
		discussions: map[int64]glDiscussions{}, approved: map[int64]bool{}}
}

// ProjectID is repo's project id, as the API answers it.
func (g *GitLab) ProjectID(repo string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.projects[repo].id
}

// SetProjectID makes repo answer id: the path now held by another project,
// as after the first was renamed or transferred and a new one created under
// its old path.
func (g *GitLab) SetProjectID(repo string, id int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.projects[repo].id = id
}

// MergeRequests are repo's merge requests.
func (g *GitLab) MergeRequests(repo string) []*gitlab.MergeRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*gitlab.MergeRequest(nil), g.projects[repo].mrs...)
}

// Notes are the notes the host wrote on "issue/N" or "mr/N" of repo, in
// order, each as it was last written (edited in place where the host edited
// it).
func (g *GitLab) Notes(repo, on string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.projects[repo].notes[on]...)
}

// Tokens are the project tokens minted, revoked ones included.
func (g *GitLab) Tokens() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for k := range g.tokens {
		out = append(out, k)
	}
	return append(out, g.revoked...)
}

// Revoked are the project tokens revoked, in order.
func (g *GitLab) Revoked() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.revoked...)
}

// Mints are the project token requests received.
func (g *GitLab) Mints() []gitlab.CreateProjectAccessTokenOptions {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]gitlab.CreateProjectAccessTokenOptions(nil), g.minted...)
}

type glError struct {
	Message string `json:"message"`
}

func (g *GitLab) serve(w http.ResponseWriter, r *http.Request) {
	if g.serveUsers(w, r) || g.serveTokenSelf(w, r) {
		return
	}
	repo, sub, ok := glProjectPath(w, r)
	if !ok {
		return
	}
	tok := r.Header.Get("PRIVATE-TOKEN")
	if tok == "" {
		tok, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fail(w, r.Method, sub) {
		return
	}
	p, ok := g.authorize(w, repo, tok)
	if !ok {
		return
	}
	repo = p.repo // asked by id
	parts := strings.Split(sub, "/")
	if g.serveEvent(w, r, p, parts) {
		return
	}
	switch {
	case r.Method == http.MethodGet && sub == "":
		writeJSON(w, http.StatusOK, gitlab.Project{ID: p.id, PathWithNamespace: repo, DefaultBranch: p.defaultBranch,
			HTTPURLToRepo: g.CloneURL(repo), WebURL: g.URL + "/" + repo, Permissions: g.parentAccess(p, tok)})
	case r.Method == http.MethodPost && sub == "access_tokens":
		g.mintToken(w, r, repo, tok)
	case r.Method == http.MethodDelete && len(parts) == 2 && parts[0] == "access_tokens":
		g.revokeToken(w, parts[1], tok)
	case r.Method == http.MethodGet && sub == "protected_branches":
		g.protectedBranches(w, p)
	case r.Method == http.MethodGet && sub == "merge_requests":
		g.listMergeRequests(w, r, p)
	case r.Method == http.MethodPost && sub == "merge_requests":
		g.createMergeRequest(w, r, p, repo, tok)
	case r.Method == http.MethodPut && len(parts) == 2 && (parts[0] == "issues" || parts[0] == "merge_requests"):
		g.update(w, r, p, parts[0], parts[1])
	case len(parts) >= 3 && parts[0] == "merge_requests" && parts[2] == "discussions":
		g.discussions(w, r, p, tok, parts)
	case r.Method == http.MethodPost && len(parts) == 3 && (parts[0] == "issues" || parts[0] == "merge_requests") && parts[2] == "notes":
		g.createNote(w, r, p, tok, parts[0], parts[1])
	case r.Method == http.MethodPut && len(parts) == 4 && (parts[0] == "issues" || parts[0] == "merge_requests") && parts[2] == "notes":
		g.editNote(w, r, p, tok, parts[0], parts[1], parts[3])
	default:
		writeJSON(w, http.StatusNotFound, glError{"404 Not Found"})
	}
}

// glProjectPath splits /api/v4/projects/<id>/<sub>, answering 404 to any other path.
func glProjectPath(w http.ResponseWriter, r *http.Request) (repo, sub string, ok bool) {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/api/v4/projects/")
	if !ok {
		writeJSON(w, http.StatusNotFound, glError{"404 Not Found"})
		return "", "", false
	}
	escID, sub, _ := strings.Cut(rest, "/")
	repo, err := url.PathUnescape(escID)
	if err != nil {
		writeJSON(w, http.StatusNotFound, glError{"404 Project Not Found"})
		return "", "", false
	}
	return repo, sub, true
}

// authorize finds repo (a project's full path, or its numeric id) for tok
// as GitLab does: 401 for a bad token, 404 out of its reach.
func (g *GitLab) authorize(w http.ResponseWriter, repo, tok string) (*glProject, bool) {
	scope, minted := g.tokens[tok]
	if tok != g.Parent && !minted {
		writeJSON(w, http.StatusUnauthorized, glError{"401 Unauthorized"})
		return nil, false
	}
	p := g.projects[repo]
	if id, err := strconv.ParseInt(repo, 10, 64); err == nil && p == nil {
		for _, byID := range g.projects {
			if byID.id == id {
				p = byID
			}
		}
	}
	if p == nil || (minted && scope != p.repo) {
		writeJSON(w, http.StatusNotFound, glError{"404 Project Not Found"})
		return nil, false
	}
	return p, true
}

// mintToken answers POST access_tokens: only the parent mints, a token for repo alone.
func (g *GitLab) mintToken(w http.ResponseWriter, r *http.Request, repo, tok string) {
	if tok != g.Parent {
		writeJSON(w, http.StatusForbidden, glError{"403 Forbidden"})
		return
	}
	var opt gitlab.CreateProjectAccessTokenOptions
	_ = json.NewDecoder(r.Body).Decode(&opt)
	g.minted = append(g.minted, opt)
	nt := "glpat-job-" + randHex(10)
	g.tokens[nt] = repo
	id := int64(len(g.minted))
	g.ids[id] = nt
	var out gitlab.ProjectAccessToken
	out.ID = id
	out.Token = nt
	out.Scopes = *opt.Scopes
	writeJSON(w, http.StatusCreated, out)
}

// revokeToken answers DELETE access_tokens/<id>: the parent revokes, the token opens nothing.
func (g *GitLab) revokeToken(w http.ResponseWriter, rawID, tok string) {
	id, _ := strconv.ParseInt(rawID, 10, 64)
	nt, ok := g.ids[id]
	if !ok || tok != g.Parent {
		writeJSON(w, http.StatusNotFound, glError{"404 Not Found"})
		return
	}
	delete(g.ids, id)
	delete(g.tokens, nt)
	g.revoked = append(g.revoked, nt)
	w.WriteHeader(http.StatusNoContent)
}

// protectedBranches answers GET protected_branches with the project's, the default branch first.
func (g *GitLab) protectedBranches(w http.ResponseWriter, p *glProject) {
	var out []*gitlab.ProtectedBranch
	for _, name := range p.protected {
		out = append(out, &gitlab.ProtectedBranch{Name: name})
	}
	writeJSON(w, http.StatusOK, out)
}

// listMergeRequests answers GET merge_requests, filtered by state and source_branch as GitLab does.
func (g *GitLab) listMergeRequests(w http.ResponseWriter, r *http.Request, p *glProject) {
	q := r.URL.Query()
	out := []*gitlab.BasicMergeRequest{}
	for _, mr := range p.mrs {
		g.refreshMergeRequest(p.repo, mr)
		if (q.Get("state") == "" || q.Get("state") == mr.State) && (q.Get("source_branch") == "" || q.Get("source_branch") == mr.SourceBranch) {
			out = append(out, &mr.BasicMergeRequest)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// createMergeRequest answers POST merge_requests, refusing a source branch git lacks.
func (g *GitLab) createMergeRequest(w http.ResponseWriter, r *http.Request, p *glProject, repo, tok string) {
	var opt gitlab.CreateMergeRequestOptions
	if err := json.NewDecoder(r.Body).Decode(&opt); err != nil || opt.SourceBranch == nil || opt.TargetBranch == nil {
		writeJSON(w, http.StatusBadRequest, glError{"400 Bad request"})
		return
	}
	sha := g.git.Head(g.t, repo, *opt.SourceBranch)
	if sha == "" {
		writeJSON(w, http.StatusBadRequest, glError{"Source branch does not exist"})
		return
	}
	n := int64(len(p.mrs) + 1)
	mr := &gitlab.MergeRequest{}
	mr.IID, mr.ProjectID, mr.SourceProjectID, mr.TargetProjectID = n, p.id, p.id, p.id
	mr.State, mr.Title, mr.SourceBranch, mr.TargetBranch = "opened", *opt.Title, *opt.SourceBranch, *opt.TargetBranch
	if opt.Description != nil {
		mr.Description = *opt.Description
	}
	mr.Draft = strings.HasPrefix(mr.Title, "Draft: ")
	mr.WebURL = fmt.Sprintf("%s/%s/-/merge_requests/%d", g.URL, repo, n)
	author := g.author(p, tok)
	mr.Author = &gitlab.BasicUser{ID: g.userID(author), Username: author}
	mr.SHA = sha
	target := g.git.Head(g.t, repo, mr.TargetBranch)
	mr.DiffRefs = gitlab.MergeRequestDiffRefs{BaseSha: target, StartSha: target, HeadSha: sha}
	p.mrs = append(p.mrs, mr)
	mr.Description = g.quickActions(p, fmt.Sprintf("mr/%d", n), mr.Description)
	_ = gitCmd(g.git.Dir(repo), "update-ref", fmt.Sprintf("refs/merge-requests/%d/head", n), sha).Run()
	writeJSON(w, http.StatusCreated, mr)
}

// createNote answers POST issues/<n>/notes or merge_requests/<n>/notes, kept
// for Notes: the note's author is tok's user (author).
func (g *GitLab) createNote(w http.ResponseWriter, r *http.Request, p *glProject, tok, kind, rawN string) {
	n, _ := strconv.Atoi(rawN)
	var opt gitlab.CreateIssueNoteOptions
	_ = json.NewDecoder(r.Body).Decode(&opt)
	key := fmt.Sprintf("issue/%d", n)
	if kind == "merge_requests" {
		key = fmt.Sprintf("mr/%d", n)
	}
	if opt.Body == nil {
		writeJSON(w, http.StatusBadRequest, glError{"400 body is missing"})
		return
	}
	p.notes[key] = append(p.notes[key], *opt.Body)
	body := g.quickActions(p, key, *opt.Body)
	if body == "" {
		// Only commands: GitLab carries them out and keeps no note.
		p.noteIDs[key] = append(p.noteIDs[key], 0)
		writeJSON(w, http.StatusAccepted, map[string]any{"commands_changes": map[string]any{}})
		return
	}
	note := g.addNote(p, key, g.author(p, tok), body, false)
	p.noteIDs[key] = append(p.noteIDs[key], note.ID)
	writeJSON(w, http.StatusCreated, note)
}

// editNote answers PUT issues/<n>/notes/<id> or merge_requests/<n>/notes/<id>
// as GitLab's note policy does: tok's user may edit a note it wrote, or any
// note of a project it is a Maintainer (or Owner) of; anyone else gets 403.
// So a job's project token (its own bot user, a Developer) can edit only
// the notes it wrote itself, while the parent's user, a Maintainer, could
// edit a person's. The note gets its new text (quick actions run again, as
// GitLab runs those an edit adds).
func (g *GitLab) editNote(w http.ResponseWriter, r *http.Request, p *glProject, tok, kind, rawN, rawID string) {
	n, _ := strconv.Atoi(rawN)
	id, _ := strconv.ParseInt(rawID, 10, 64)
	var opt gitlab.UpdateIssueNoteOptions
	_ = json.NewDecoder(r.Body).Decode(&opt)
	key := fmt.Sprintf("issue/%d", n)
	if kind == "merge_requests" {
		key = fmt.Sprintf("mr/%d", n)
	}
	if opt.Body == nil {
		writeJSON(w, http.StatusBadRequest, glError{"400 body is missing"})
		return
	}
	editor := g.author(p, tok)
	for _, nt := range g.thread(p, key).notes {
		if nt.ID != id {
			continue
		}
		if nt.Author.Username != editor && p.members[g.userID(editor)] < gitlab.MaintainerPermissions {
			g.noteEditsRefused++
			writeJSON(w, http.StatusForbidden, glError{"403 Forbidden"})
			return
		}
		g.noteEdits++
		nt.Body = g.quickActions(p, key, *opt.Body)
		for i, posted := range p.noteIDs[key] {
			if posted == id {
				p.notes[key][i] = *opt.Body
			}
		}
		writeJSON(w, http.StatusOK, nt)
		return
	}
	writeJSON(w, http.StatusNotFound, glError{"404 Not found"})
}

// NoteEdits counts the note edits the double made.
func (g *GitLab) NoteEdits() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.noteEdits
}

// NoteEditsRefused counts the note edits answered 403: the token's user
// neither wrote the note nor is a Maintainer of its project.
func (g *GitLab) NoteEditsRefused() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.noteEditsRefused
}

// NoteAuthors are the authors of the notes Notes answers, in the same
// order ("" for a note of commands only, which GitLab keeps none of).
func (g *GitLab) NoteAuthors(repo, on string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.projects[repo]
	out := make([]string, 0, len(p.noteIDs[on]))
	for _, id := range p.noteIDs[on] {
		author := ""
		for _, nt := range g.thread(p, on).notes {
			if nt.ID == id && id != 0 {
				author = nt.Author.Username
			}
		}
		out = append(out, author)
	}
	return out
}
