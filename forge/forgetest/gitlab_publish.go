package forgetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	gitlab "gitlab.com/gitlab-org/api/client-go/v2"
)

// What a job's outputs are posted to on the GitLab double: discussions on a
// merge request's diff and replies in them, labels of issues and merge
// requests, and GitLab's quick actions. A note or a description line that
// starts with a quick action (/merge, /approve, /close, /label ...) is
// carried out and taken out of the text, as GitLab does: a test sees
// whether a job's text could merge, approve or relabel anything.

// glQuickAction is a line GitLab reads as a command.
var glQuickAction = regexp.MustCompile(`^/(merge|approve|unapprove|close|reopen|label|unlabel|relabel|assign|unassign|title|draft|ready|submit_review|rebase|lock|unlock|award|react|copy_metadata|target_branch|remove_source_branch_on_merge)(\s.*)?$`)

// glDiscussions are a merge request's discussions, under "mr/N".
type glDiscussions []*gitlab.Discussion

// QuickAction is a quick action the double carried out.
type QuickAction struct {
	On      string // "issue/N" or "mr/N"
	Command string // the whole line, as written
}

// QuickActions are the quick actions carried out on repo.
func (g *GitLab) QuickActions(repo string) []QuickAction {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.projects[repo].actions)
}

// Approved reports whether merge request iid of repo was approved.
func (g *GitLab) Approved(repo string, iid int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.projects[repo].approved[int64(iid)]
}

// Discussions are the discussions on merge request iid of repo.
func (g *GitLab) Discussions(repo string, iid int) []*gitlab.Discussion {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.projects[repo].discussions[int64(iid)])
}

// Labels are the labels of ("issue/N" or "mr/N") of repo.
func (g *GitLab) Labels(repo, on string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.projects[repo]
	if mr := g.mergeRequest(p, on); mr != nil {
		return slices.Clone([]string(mr.Labels))
	}
	return slices.Clone([]string(g.thread(p, on).issue.Labels))
}

// mergeRequest is the merge request on names ("mr/N"), nil for any other.
// The caller holds g.mu.
func (g *GitLab) mergeRequest(p *glProject, on string) *gitlab.MergeRequest {
	kind, n, _ := strings.Cut(on, "/")
	iid, _ := strconv.ParseInt(n, 10, 64)
	if kind != "mr" {
		return nil
	}
	for _, mr := range p.mrs {
		if mr.IID == iid {
			return mr
		}
	}
	return nil
}

// quickActions carries out the quick actions of text on ("issue/N" or
// "mr/N") and returns the text without them. The caller holds g.mu.
func (g *GitLab) quickActions(p *glProject, on, text string) string {
	var kept []string
	for line := range strings.SplitSeq(text, "\n") {
		m := glQuickAction.FindStringSubmatch(strings.TrimRight(line, "\r"))
		if m == nil {
			kept = append(kept, line)
			continue
		}
		p.actions = append(p.actions, QuickAction{On: on, Command: line})
		arg := strings.TrimSpace(m[2])
		mr := g.mergeRequest(p, on)
		switch m[1] {
		case "merge":
			if mr != nil {
				mr.State = "merged"
			}
		case "approve":
			if mr != nil {
				p.approved[mr.IID] = true
			}
		case "close":
			if mr != nil {
				mr.State = "closed"
			} else {
				g.thread(p, on).issue.State = "closed"
			}
		case "label":
			for _, l := range strings.Fields(arg) {
				g.editLabels(p, on, []string{strings.Trim(strings.TrimPrefix(l, "~"), `"`)}, nil)
			}
		}
	}
	return strings.TrimSpace(strings.Join(kept, "\n"))
}

// editLabels adds and removes labels of on. The caller holds g.mu.
func (g *GitLab) editLabels(p *glProject, on string, add, remove []string) []string {
	var labels *gitlab.Labels
	if mr := g.mergeRequest(p, on); mr != nil {
		labels = &mr.Labels
	} else {
		labels = &g.thread(p, on).issue.Labels
	}
	for _, l := range add {
		if l != "" && !slices.Contains(*labels, l) {
			*labels = append(*labels, l)
		}
	}
	*labels = slices.DeleteFunc(*labels, func(l string) bool { return slices.Contains(remove, l) })
	return *labels
}

// glUpdate is the labels part of an issue's or a merge request's update,
// which client-go sends as comma-separated strings.
type glUpdate struct {
	AddLabels    *string `json:"add_labels"`
	RemoveLabels *string `json:"remove_labels"`
}

func splitLabels(s *string) []string {
	if s == nil || *s == "" {
		return nil
	}
	return strings.Split(*s, ",")
}

// update answers PUT issues/<n> and merge_requests/<n>: their labels.
func (g *GitLab) update(w http.ResponseWriter, r *http.Request, p *glProject, kind, rawN string) {
	var u glUpdate
	if err := json.NewDecoder(r.Body).Decode(&u); err != nil {
		writeJSON(w, http.StatusBadRequest, glError{"400 Bad request"})
		return
	}
	on := "issue/" + rawN
	if kind == "merge_requests" {
		on = "mr/" + rawN
		if g.mergeRequest(p, on) == nil {
			writeJSON(w, http.StatusNotFound, glError{"404 Not found"})
			return
		}
	}
	labels := g.editLabels(p, on, splitLabels(u.AddLabels), splitLabels(u.RemoveLabels))
	if mr := g.mergeRequest(p, on); mr != nil {
		writeJSON(w, http.StatusOK, mr)
		return
	}
	th := g.thread(p, on)
	th.issue.Labels = labels
	writeJSON(w, http.StatusOK, th.issue)
}

// discussions answers GET and POST merge_requests/<n>/discussions and POST
// merge_requests/<n>/discussions/<id>/notes.
func (g *GitLab) discussions(w http.ResponseWriter, r *http.Request, p *glProject, tok string, parts []string) {
	iid, _ := strconv.ParseInt(parts[1], 10, 64)
	on := "mr/" + parts[1]
	if g.mergeRequest(p, on) == nil {
		writeJSON(w, http.StatusNotFound, glError{"404 Not found"})
		return
	}
	author := g.author(p, tok)
	switch {
	case r.Method == http.MethodGet && len(parts) == 3:
		writeJSON(w, http.StatusOK, glPage(w, r, p.discussions[iid]))
	case r.Method == http.MethodPost && len(parts) == 3:
		var opt gitlab.CreateMergeRequestDiscussionOptions
		if err := json.NewDecoder(r.Body).Decode(&opt); err != nil || opt.Body == nil || opt.Position == nil ||
			opt.Position.NewPath == nil || opt.Position.NewLine == nil || opt.Position.HeadSHA == nil {
			writeJSON(w, http.StatusBadRequest, glError{"400 Bad request"})
			return
		}
		body := g.quickActions(p, on, *opt.Body)
		n := g.addNote(p, on, author, body, false)
		n.Position = &gitlab.NotePosition{NewPath: *opt.Position.NewPath, NewLine: *opt.Position.NewLine, HeadSHA: *opt.Position.HeadSHA,
			PositionType: "text"}
		d := &gitlab.Discussion{ID: fmt.Sprintf("d%x", n.ID), Notes: []*gitlab.Note{n}}
		p.discussions[iid] = append(p.discussions[iid], d)
		writeJSON(w, http.StatusCreated, d)
	case r.Method == http.MethodPost && len(parts) == 5 && parts[4] == "notes":
		var opt gitlab.AddMergeRequestDiscussionNoteOptions
		if err := json.NewDecoder(r.Body).Decode(&opt); err != nil || opt.Body == nil {
			writeJSON(w, http.StatusBadRequest, glError{"400 Bad request"})
			return
		}
		for _, d := range p.discussions[iid] {
			if d.ID == parts[3] {
				n := g.addNote(p, on, author, g.quickActions(p, on, *opt.Body), false)
				d.Notes = append(d.Notes, n)
				writeJSON(w, http.StatusCreated, n)
				return
			}
		}
		writeJSON(w, http.StatusNotFound, glError{"404 Discussion Not Found"})
	default:
		writeJSON(w, http.StatusNotFound, glError{"404 Not Found"})
	}
}

// AddDiffNote starts a discussion by author on line of path of merge
// request iid's diff, as a reviewer would, and returns its note's id.
func (g *GitLab) AddDiffNote(repo string, iid int, author, path string, line int, body string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.projects[repo]
	n := g.addNote(p, fmt.Sprintf("mr/%d", iid), author, body, false)
	n.Position = &gitlab.NotePosition{NewPath: path, NewLine: int64(line), PositionType: "text"}
	p.discussions[int64(iid)] = append(p.discussions[int64(iid)], &gitlab.Discussion{ID: fmt.Sprintf("d%x", n.ID), Notes: []*gitlab.Note{n}})
	return n.ID
}

// author is who tok writes as: a project token's own bot user
// (project_<project id>_bot_<token id>, a bot), else the parent's user. The
// caller holds g.mu.
func (g *GitLab) author(p *glProject, tok string) string {
	for id, t := range g.ids {
		if t == tok {
			login := fmt.Sprintf("project_%d_bot_%d", p.id, id)
			if g.bots == nil {
				g.bots = map[int64]bool{}
			}
			g.bots[g.userID(login)] = true
			return login
		}
	}
	return "root"
}

// serveUsers answers GET /api/v4/users/<id> and GET /api/v4/user for a valid
// token, reporting false for any other path.
func (g *GitLab) serveUsers(w http.ResponseWriter, r *http.Request) bool {
	path := r.URL.Path
	if r.Method != http.MethodGet || (path != "/api/v4/user" && !strings.HasPrefix(path, "/api/v4/users/")) {
		return false
	}
	tok := r.Header.Get("PRIVATE-TOKEN")
	if tok == "" {
		tok, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, minted := g.tokens[tok]; !minted && tok != g.Parent {
		writeJSON(w, http.StatusUnauthorized, glError{"401 Unauthorized"})
		return true
	}
	if path == "/api/v4/user" {
		if g.fail(w, r.Method, GLUser) {
			return true
		}
		login := "root"
		if repo, minted := g.tokens[tok]; minted {
			login = g.author(g.projects[repo], tok)
		}
		id := g.userID(login)
		writeJSON(w, http.StatusOK, gitlab.User{ID: id, Username: login, Bot: g.bots[id]})
		return true
	}
	id, _ := strconv.ParseInt(strings.TrimPrefix(path, "/api/v4/users/"), 10, 64)
	for login, uid := range g.users {
		if uid == id {
			writeJSON(w, http.StatusOK, gitlab.User{ID: id, Username: login, Bot: g.bots[id]})
			return true
		}
	}
	writeJSON(w, http.StatusNotFound, glError{"404 User Not Found"})
	return true
}

// refreshMergeRequest follows a merge request's source branch, as GitLab
// does on a push: its head commit, diff refs and
// refs/merge-requests/<iid>/head. The caller holds g.mu.
func (g *GitLab) refreshMergeRequest(repo string, mr *gitlab.MergeRequest) {
	sha := g.git.Head(g.t, repo, mr.SourceBranch)
	if sha == "" || sha == mr.SHA {
		return
	}
	mr.SHA = sha
	mr.DiffRefs.HeadSha = sha
	mr.DiffRefs.StartSha = g.git.Head(g.t, repo, mr.TargetBranch)
	mr.DiffRefs.BaseSha = mr.DiffRefs.StartSha
	_ = gitCmd(g.git.Dir(repo), "update-ref", fmt.Sprintf("refs/merge-requests/%d/head", mr.IID), sha).Run()
}
