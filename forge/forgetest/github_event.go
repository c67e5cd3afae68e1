package forgetest

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-github/v84/github"
)

// What a job's event is read from on the GitHub double: issues (and pull
// requests' conversations), their comments and events, reviews with their
// inline comments, pull requests' changed files. Lists are paged as GitHub
// pages them (page, per_page, a Link header naming the next and the last).

// ghIssue is an issue as the double keeps it.
type ghIssue struct {
	issue  *github.Issue
	thread []*github.IssueComment
	events []*github.IssueEvent
}

// ghReview is a submitted review and its inline comments.
type ghReview struct {
	number int
	review *github.PullRequestReview
	notes  []*github.PullRequestComment
}

// ReviewNote is an inline comment of a review AddReview adds.
type ReviewNote struct {
	Path, Author, Body string
	Line               int
}

// ghEpoch dates the double's comments and events, one second apart.
var ghEpoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func (g *GitHub) eventRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /repos/{owner}/{name}/issues/{n}", g.getIssue)
	// One pattern for issues/{n}/comments, issues/{n}/events and
	// issues/comments/{id}, which ServeMux cannot tell apart.
	mux.HandleFunc("GET /repos/{owner}/{name}/issues/{n}/{what}", g.issueList)
	mux.HandleFunc("GET /repos/{owner}/{name}/pulls/{n}/files", g.pullFiles)
	mux.HandleFunc("GET /repos/{owner}/{name}/pulls/{n}/reviews/{id}", g.getReview)
	mux.HandleFunc("GET /repos/{owner}/{name}/pulls/{n}/reviews/{id}/comments", g.reviewComments)
}

// nextID numbers comments, events and reviews across the double.
func (g *GitHub) nextID() int64 {
	g.ids++
	return 9000 + g.ids
}

func ghUser(login string) *github.User {
	if login == AppSlug+"[bot]" {
		// The App's bot, as GET /users answers it.
		return &github.User{Login: github.Ptr(login), ID: github.Ptr(int64(AppBotID)), Type: github.Ptr("Bot")}
	}
	var id int64
	for _, c := range login {
		id = id*31 + int64(c)
	}
	return &github.User{Login: github.Ptr(login), ID: github.Ptr(id%1_000_000 + 1)}
}

// AddIssue declares issue (or pull request conversation) n of repo with its
// author, title, body and labels. An issue not declared answers as an open
// issue titled "issue #<n>" (a pull request's own title for one), so tests
// about something else need not declare it.
func (g *GitHub) AddIssue(repo string, n int, author, title, body string, labels ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	is := g.issue(g.repos[repo], n)
	is.issue.User, is.issue.Title, is.issue.Body = ghUser(author), github.Ptr(title), github.Ptr(body)
	is.issue.Labels = nil
	for _, l := range labels {
		is.issue.Labels = append(is.issue.Labels, &github.Label{Name: github.Ptr(l)})
	}
}

// issue is issue n of rp, made as the default when not declared.
func (g *GitHub) issue(rp *ghRepo, n int) *ghIssue {
	if is := rp.issues[n]; is != nil {
		return is
	}
	is := &github.Issue{Number: github.Ptr(n), State: github.Ptr("open"), Title: github.Ptr(fmt.Sprintf("issue #%d", n)),
		Body: github.Ptr(""), User: ghUser("octocat")}
	for _, pr := range rp.pulls {
		if pr.GetNumber() == n {
			is.Title, is.Body, is.User = pr.Title, pr.Body, pr.User
			is.PullRequestLinks = &github.PullRequestLinks{HTMLURL: pr.HTMLURL}
		}
	}
	rp.issues[n] = &ghIssue{issue: is}
	return rp.issues[n]
}

// AddIssueComment adds a comment by author to issue n of repo and returns
// its id.
func (g *GitHub) AddIssueComment(repo string, n int, author, body string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addComment(g.repos[repo], n, author, body).GetID()
}

// AddDeliveredComment adds the comment a delivery carries, under its own id,
// so a job made from a recorded webhook payload finds its comment.
func (g *GitHub) AddDeliveredComment(repo string, n int, id int64, author, body string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	cm := g.addComment(g.repos[repo], n, author, body)
	cm.ID = github.Ptr(id)
}

func (g *GitHub) addComment(rp *ghRepo, n int, author, body string) *github.IssueComment {
	is := g.issue(rp, n)
	id := g.nextID()
	cm := &github.IssueComment{ID: github.Ptr(id), Body: github.Ptr(body), User: ghUser(author),
		CreatedAt: &github.Timestamp{Time: ghEpoch.Add(time.Duration(id) * time.Second)}}
	is.thread = append(is.thread, cm)
	return cm
}

// AddLabelEvent records actor adding label to issue n of repo, as GitHub's
// "labeled" issue event, and puts the label on the issue.
func (g *GitHub) AddLabelEvent(repo string, n int, actor, label string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	is := g.issue(g.repos[repo], n)
	id := g.nextID()
	is.events = append(is.events, &github.IssueEvent{ID: github.Ptr(id), Event: github.Ptr("labeled"), Actor: ghUser(actor),
		Label: &github.Label{Name: github.Ptr(label)}, CreatedAt: &github.Timestamp{Time: ghEpoch.Add(time.Duration(id) * time.Second)}})
	is.issue.Labels = append(is.issue.Labels, &github.Label{Name: github.Ptr(label)})
}

// AddReview submits a review of pull request n of repo by author, with its
// state (APPROVED, CHANGES_REQUESTED, COMMENTED), body and inline comments,
// and returns its id.
func (g *GitHub) AddReview(repo string, n int, author, state, body string, notes ...ReviewNote) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	id := g.nextID()
	rv := &ghReview{number: n, review: &github.PullRequestReview{ID: github.Ptr(id), User: ghUser(author),
		State: github.Ptr(state), Body: github.Ptr(body)}}
	for _, nt := range notes {
		rv.notes = append(rv.notes, &github.PullRequestComment{ID: github.Ptr(g.nextID()), PullRequestReviewID: github.Ptr(id),
			Path: github.Ptr(nt.Path), Line: github.Ptr(nt.Line), User: ghUser(nt.Author), Body: github.Ptr(nt.Body)})
	}
	g.repos[repo].reviews[id] = rv
	return id
}

// SetPullFiles sets the files pull request n of repo changes.
func (g *GitHub) SetPullFiles(repo string, n int, files ...*github.CommitFile) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.repos[repo].files[n] = files
	for _, pr := range g.repos[repo].pulls {
		if pr.GetNumber() == n {
			pr.ChangedFiles = github.Ptr(len(files))
		}
	}
}

func (g *GitHub) getIssue(w http.ResponseWriter, r *http.Request) {
	rp, _, ok := g.authRepo(w, r)
	if !ok {
		return
	}
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil {
		writeJSON(w, http.StatusNotFound, github.ErrorResponse{Message: "Not Found"})
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	writeJSON(w, http.StatusOK, g.issue(rp, n).issue)
}

// issueList answers issues/{n}/comments, issues/{n}/events and
// issues/comments/{id}.
func (g *GitHub) issueList(w http.ResponseWriter, r *http.Request) {
	rp, _, ok := g.authRepo(w, r)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.PathValue("n") == "comments" {
		id, _ := strconv.ParseInt(r.PathValue("what"), 10, 64)
		for _, is := range rp.issues {
			for _, cm := range is.thread {
				if cm.GetID() == id {
					writeJSON(w, http.StatusOK, cm)
					return
				}
			}
		}
		writeJSON(w, http.StatusNotFound, github.ErrorResponse{Message: "Not Found"})
		return
	}
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil {
		writeJSON(w, http.StatusNotFound, github.ErrorResponse{Message: "Not Found"})
		return
	}
	is := g.issue(rp, n)
	switch r.PathValue("what") {
	case "comments":
		writeJSON(w, http.StatusOK, ghPage(w, r, is.thread))
	case "events":
		writeJSON(w, http.StatusOK, ghPage(w, r, is.events))
	default:
		writeJSON(w, http.StatusNotFound, github.ErrorResponse{Message: "Not Found"})
	}
}

func (g *GitHub) pullFiles(w http.ResponseWriter, r *http.Request) {
	rp, _, ok := g.authRepo(w, r)
	if !ok {
		return
	}
	n, _ := strconv.Atoi(r.PathValue("n"))
	g.mu.Lock()
	defer g.mu.Unlock()
	writeJSON(w, http.StatusOK, ghPage(w, r, rp.files[n]))
}

// review finds review id of pull request n, answering 404 for the caller when there is none.
func (g *GitHub) review(w http.ResponseWriter, r *http.Request) *ghReview {
	rp, _, ok := g.authRepo(w, r)
	if !ok {
		return nil
	}
	n, _ := strconv.Atoi(r.PathValue("n"))
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	g.mu.Lock()
	rv := rp.reviews[id]
	g.mu.Unlock()
	if rv == nil || rv.number != n {
		writeJSON(w, http.StatusNotFound, github.ErrorResponse{Message: "Not Found"})
		return nil
	}
	return rv
}

func (g *GitHub) getReview(w http.ResponseWriter, r *http.Request) {
	if rv := g.review(w, r); rv != nil {
		writeJSON(w, http.StatusOK, rv.review)
	}
}

func (g *GitHub) reviewComments(w http.ResponseWriter, r *http.Request) {
	if rv := g.review(w, r); rv != nil {
		g.mu.Lock()
		defer g.mu.Unlock()
		writeJSON(w, http.StatusOK, ghPage(w, r, rv.notes))
	}
}

// ghPage answers one page of items as GitHub does: page and per_page (30
// by default, 100 at most), and a Link header naming the next page and the
// last one, never on the last page itself. An empty list is an empty array.
func ghPage[T any](w http.ResponseWriter, r *http.Request, items []T) []T {
	q := r.URL.Query()
	per, err := strconv.Atoi(q.Get("per_page"))
	if err != nil || per <= 0 {
		per = 30
	}
	per = min(per, 100)
	page, err := strconv.Atoi(q.Get("page"))
	if err != nil || page <= 0 {
		page = 1
	}
	last := max((len(items)+per-1)/per, 1)
	if page < last {
		link := func(p int) string {
			u := url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawQuery: fmt.Sprintf("page=%d&per_page=%d", p, per)}
			return "<" + u.String() + ">"
		}
		w.Header().Set("Link", strings.Join([]string{link(page+1) + `; rel="next"`, link(last) + `; rel="last"`}, ", "))
	}
	start := min((page-1)*per, len(items))
	return append([]T{}, items[start:min(start+per, len(items))]...)
}
