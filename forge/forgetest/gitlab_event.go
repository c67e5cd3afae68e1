package forgetest

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gitlab "gitlab.com/gitlab-org/api/client-go/v2"
)

// What a job's event is read from on the GitLab double: issues, merge
// requests, their notes (GitLab's comments, system notes among them) and
// resource label events, merge requests' diffs, and project members. Lists
// are paged as GitLab pages them (page, per_page, X-Total and X-Next-Page).

// glThread is an issue's or a merge request's notes and label events, under
// "issue/N" or "mr/N".
type glThread struct {
	issue  *gitlab.Issue // nil for a merge request
	notes  []*gitlab.Note
	labels []*gitlab.LabelEvent
	diffs  []*gitlab.MergeRequestDiff
}

// glEpoch dates the double's notes and events, one second apart.
var glEpoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// userID is login's id on the double, made on first use.
func (g *GitLab) userID(login string) int64 {
	if g.users == nil {
		g.users = map[string]int64{}
	}
	if id, ok := g.users[login]; ok {
		return id
	}
	g.users[login] = int64(len(g.users) + 100)
	return g.users[login]
}

// UserID is login's user id on the double, as notes, members and GET /user
// name it.
func (g *GitLab) UserID(login string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.userID(login)
}

func (g *GitLab) nextID() int64 {
	g.seq++
	return 7000 + g.seq
}

// thread is the thread on ("issue/N" or "mr/N") of p, an undeclared issue
// made as an open issue titled "issue #<n>", so tests about something else
// need not declare it.
func (g *GitLab) thread(p *glProject, on string) *glThread {
	if th := p.threads[on]; th != nil {
		return th
	}
	th := &glThread{}
	if kind, n, _ := strings.Cut(on, "/"); kind == "issue" {
		iid, _ := strconv.ParseInt(n, 10, 64)
		th.issue = &gitlab.Issue{IID: iid, ProjectID: p.id, State: "opened", Title: fmt.Sprintf("issue #%d", iid),
			Author: &gitlab.IssueAuthor{ID: g.userID("octocat"), Username: "octocat"}}
	}
	p.threads[on] = th
	return th
}

// AddIssue declares issue iid of repo with its author, title, description
// and labels.
func (g *GitLab) AddIssue(repo string, iid int, author, title, body string, labels ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.projects[repo]
	th := g.thread(p, fmt.Sprintf("issue/%d", iid))
	th.issue.Author = &gitlab.IssueAuthor{ID: g.userID(author), Username: author}
	th.issue.Title, th.issue.Description, th.issue.Labels = title, body, labels
	th.issue.WebURL = fmt.Sprintf("%s/%s/-/issues/%d", g.URL, repo, iid)
}

// OpenMergeRequest opens a merge request from source to target (branches
// of repo) as author would, with its refs/merge-requests/<iid>/head ref,
// and returns its iid.
func (g *GitLab) OpenMergeRequest(t testing.TB, repo, source, target, author, title, body string, labels ...string) int {
	t.Helper()
	sha := g.git.Head(t, repo, source)
	if sha == "" {
		t.Fatalf("no branch %s in %s", source, repo)
	}
	g.mu.Lock()
	p := g.projects[repo]
	mr := &gitlab.MergeRequest{}
	mr.IID, mr.ProjectID, mr.SourceProjectID, mr.TargetProjectID = int64(len(p.mrs)+1), p.id, p.id, p.id
	mr.State, mr.Title, mr.Description, mr.SourceBranch, mr.TargetBranch = "opened", title, body, source, target
	mr.SHA, mr.Labels = sha, labels
	mr.Author = &gitlab.BasicUser{ID: g.userID(author), Username: author}
	mr.WebURL = fmt.Sprintf("%s/%s/-/merge_requests/%d", g.URL, repo, mr.IID)
	p.mrs = append(p.mrs, mr)
	g.mu.Unlock()
	Git(t, g.git.Dir(repo), "update-ref", fmt.Sprintf("refs/merge-requests/%d/head", mr.IID), sha)
	return int(mr.IID)
}

// AddNote adds a note by author on ("issue/N" or "mr/N") of repo and
// returns its id; a system note is GitLab's own record of an event.
func (g *GitLab) AddNote(repo, on, author, body string, system bool) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addNote(g.projects[repo], on, author, body, system).ID
}

// Note is the text of note id on ("issue/N" or "mr/N") of repo as it is
// now, whoever wrote it ("" when there is none).
func (g *GitLab) Note(repo, on string, id int64) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, n := range g.thread(g.projects[repo], on).notes {
		if n.ID == id {
			return n.Body
		}
	}
	return ""
}

func (g *GitLab) addNote(p *glProject, on, author, body string, system bool) *gitlab.Note {
	th := g.thread(p, on)
	id := g.nextID()
	created := glEpoch.Add(time.Duration(id) * time.Second)
	n := &gitlab.Note{ID: id, Body: body, System: system, CreatedAt: &created,
		Author: gitlab.NoteAuthor{ID: g.userID(author), Username: author}}
	th.notes = append(th.notes, n)
	return n
}

// AddLabelEvent records user adding label to ("issue/N" or "mr/N") of
// repo, as a resource label event.
func (g *GitLab) AddLabelEvent(repo, on, user, label string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	th := g.thread(g.projects[repo], on)
	id := g.nextID()
	created := glEpoch.Add(time.Duration(id) * time.Second)
	th.labels = append(th.labels, &gitlab.LabelEvent{ID: id, Action: "add", CreatedAt: &created,
		User: gitlab.BasicUser{ID: g.userID(user), Username: user}, Label: gitlab.LabelEventLabel{Name: label}})
}

// SetDiffs sets the diffs of merge request iid of repo.
func (g *GitLab) SetDiffs(repo string, iid int, diffs ...*gitlab.MergeRequestDiff) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.thread(g.projects[repo], fmt.Sprintf("mr/%d", iid)).diffs = diffs
}

// SetMember makes login a member of repo with level (inherited or not:
// the double does not tell them apart).
func (g *GitLab) SetMember(repo, login string, level gitlab.AccessLevelValue) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.projects[repo].members[g.userID(login)] = level
}

// Fail answers the next times requests of method to a project path (the
// part after /projects/<id>/) starting with sub with status; sub GLUser
// is GET /user.
func (g *GitLab) Fail(method, sub string, status, times int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.faults = append(g.faults, fault{method: method, path: sub, status: status, times: times})
}

// GLUser names GET /user to Fail.
const GLUser = "@user"

// Calls counts the requests of "METHOD sub" (the part after /projects/<id>/).
func (g *GitLab) Calls(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[key]
}

// fail counts the request and answers an injected fault, reporting whether
// it did. The caller holds g.mu.
func (g *GitLab) fail(w http.ResponseWriter, method, sub string) bool {
	if g.calls == nil {
		g.calls = map[string]int{}
	}
	g.calls[method+" "+sub]++
	for i := range g.faults {
		f := &g.faults[i]
		if f.times > 0 && f.method == method && strings.HasPrefix(sub, f.path) {
			f.times--
			writeJSON(w, f.status, glError{http.StatusText(f.status)})
			return true
		}
	}
	return false
}

// serveEvent answers the reads of an event, reporting false for any other
// request. The caller holds g.mu.
func (g *GitLab) serveEvent(w http.ResponseWriter, r *http.Request, p *glProject, parts []string) bool {
	if r.Method != http.MethodGet {
		return false
	}
	kind := map[string]string{"issues": "issue", "merge_requests": "mr"}[parts[0]]
	switch {
	case len(parts) == 3 && parts[0] == "members" && parts[1] == "all":
		g.member(w, p, parts[2])
	case kind == "" || len(parts) < 2:
		return false
	case len(parts) == 2:
		g.getIssueOrMR(w, p, kind, parts[1])
	case len(parts) == 3 && parts[2] == "notes":
		g.listNotes(w, r, g.thread(p, kind+"/"+parts[1]))
	case len(parts) == 4 && parts[2] == "notes":
		g.getNote(w, g.thread(p, kind+"/"+parts[1]), parts[3])
	case len(parts) == 3 && parts[2] == "resource_label_events":
		writeJSON(w, http.StatusOK, glPage(w, r, g.thread(p, kind+"/"+parts[1]).labels))
	case len(parts) == 3 && parts[2] == "diffs" && kind == "mr":
		writeJSON(w, http.StatusOK, glPage(w, r, g.thread(p, kind+"/"+parts[1]).diffs))
	default:
		return false
	}
	return true
}

func (g *GitLab) getIssueOrMR(w http.ResponseWriter, p *glProject, kind, rawIID string) {
	iid, err := strconv.ParseInt(rawIID, 10, 64)
	if err != nil {
		writeJSON(w, http.StatusNotFound, glError{"404 Not found"})
		return
	}
	if kind == "issue" {
		th := g.thread(p, "issue/"+rawIID)
		th.issue.UserNotesCount = th.userNotes()
		writeJSON(w, http.StatusOK, th.issue)
		return
	}
	for _, mr := range p.mrs {
		if mr.IID == iid {
			g.refreshMergeRequest(p.repo, mr)
			mr.UserNotesCount = g.thread(p, "mr/"+rawIID).userNotes()
			writeJSON(w, http.StatusOK, mr)
			return
		}
	}
	writeJSON(w, http.StatusNotFound, glError{"404 Not found"})
}

// userNotes counts the thread's notes written by people, as GitLab's
// user_notes_count does.
func (th *glThread) userNotes() int64 {
	var n int64
	for _, nt := range th.notes {
		if !nt.System {
			n++
		}
	}
	return n
}

// listNotes answers a thread's notes, sorted by creation, newest first
// unless asked otherwise (GitLab's default).
func (g *GitLab) listNotes(w http.ResponseWriter, r *http.Request, th *glThread) {
	notes := slices.Clone(th.notes)
	if r.URL.Query().Get("sort") != "asc" {
		slices.Reverse(notes)
	}
	writeJSON(w, http.StatusOK, glPage(w, r, notes))
}

func (g *GitLab) getNote(w http.ResponseWriter, th *glThread, rawID string) {
	id, _ := strconv.ParseInt(rawID, 10, 64)
	for _, n := range th.notes {
		if n.ID == id {
			writeJSON(w, http.StatusOK, n)
			return
		}
	}
	writeJSON(w, http.StatusNotFound, glError{"404 Not found"})
}

func (g *GitLab) member(w http.ResponseWriter, p *glProject, rawID string) {
	id, _ := strconv.ParseInt(rawID, 10, 64)
	level, ok := p.members[id]
	if !ok {
		writeJSON(w, http.StatusNotFound, glError{"404 Not found"})
		return
	}
	writeJSON(w, http.StatusOK, gitlab.ProjectMember{ID: id, AccessLevel: level})
}

// glPage answers one page of items as GitLab does: page and per_page (20
// by default, 100 at most), with X-Total, X-Total-Pages, X-Page and
// X-Next-Page (empty on the last page).
func glPage[T any](w http.ResponseWriter, r *http.Request, items []T) []T {
	q := r.URL.Query()
	per, err := strconv.Atoi(q.Get("per_page"))
	if err != nil || per <= 0 {
		per = 20
	}
	per = min(per, 100)
	page, err := strconv.Atoi(q.Get("page"))
	if err != nil || page <= 0 {
		page = 1
	}
	pages := max((len(items)+per-1)/per, 1)
	next := ""
	if page < pages {
		next = strconv.Itoa(page + 1)
	}
	h := w.Header()
	h.Set("X-Total", strconv.Itoa(len(items)))
	h.Set("X-Total-Pages", strconv.Itoa(pages))
	h.Set("X-Per-Page", strconv.Itoa(per))
	h.Set("X-Page", strconv.Itoa(page))
	h.Set("X-Next-Page", next)
	start := min((page-1)*per, len(items))
	return append([]T{}, items[start:min(start+per, len(items))]...)
}
