package forgetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-github/v84/github"
)

// What a job's outputs are posted to on the GitHub double: reviews of a
// pull request with their inline comments, replies to review comments, an
// issue's labels. The double posts what it is sent, as GitHub would, and
// keeps it for the test; it never checks a comment against the diff, so a
// test can see what the host itself let through.

// PostedReview is a review the host submitted.
type PostedReview struct {
	Number int
	Review github.PullRequestReviewRequest
}

// PostedReply is a reply the host posted to a review comment.
type PostedReply struct {
	Number int
	To     int64
	Body   string
}

func (g *GitHub) publishRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /repos/{owner}/{name}/pulls/{n}/reviews", g.createReview)
	mux.HandleFunc("POST /repos/{owner}/{name}/pulls/{n}/comments/{id}/replies", g.createReply)
	mux.HandleFunc("POST /repos/{owner}/{name}/pulls/{n}/comments", g.createReply)
	mux.HandleFunc("POST /repos/{owner}/{name}/issues/{n}/labels", g.addLabels)
	mux.HandleFunc("DELETE /repos/{owner}/{name}/issues/{n}/labels/{label}", g.removeLabel)
	mux.HandleFunc("GET /user", g.self)
}

// appBot is the App's bot user, the author of what installation tokens write.
func appBot() *github.User {
	return &github.User{Login: github.Ptr(AppSlug + "[bot]"), ID: github.Ptr(int64(AppBotID)), Type: github.Ptr("Bot")}
}

// self answers GET /user: an installation token has no user, as on GitHub;
// a personal token's is its own (patUser).
func (g *GitHub) self(w http.ResponseWriter, r *http.Request) {
	if g.patUser(w, r) {
		return
	}
	writeJSON(w, http.StatusForbidden, github.ErrorResponse{Message: "Resource not accessible by integration"})
}

// Reviews are the reviews the host submitted on repo's pull requests.
func (g *GitHub) Reviews(repo string) []PostedReview {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.repos[repo].posted)
}

// Replies are the replies the host posted to repo's review comments.
func (g *GitHub) Replies(repo string) []PostedReply {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.repos[repo].replies)
}

// Labels are the labels on issue (or pull request) n of repo.
func (g *GitHub) Labels(repo string, n int) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, l := range g.issue(g.repos[repo], n).issue.Labels {
		out = append(out, l.GetName())
	}
	return out
}

// OpenPullBy opens a pull request from head to base of repo as author
// would, and returns its number.
func (g *GitHub) OpenPullBy(t testing.TB, repo, head, base, author string) int {
	t.Helper()
	n := g.OpenPull(t, repo, head, base)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, pr := range g.repos[repo].pulls {
		if pr.GetNumber() == n {
			pr.User = ghUser(author)
			pr.User.Type = github.Ptr("User")
		}
	}
	return n
}

func (g *GitHub) createReview(w http.ResponseWriter, r *http.Request) {
	rp, _, ok := g.authRepo(w, r)
	if !ok {
		return
	}
	n, _ := strconv.Atoi(r.PathValue("n"))
	var req github.PullRequestReviewRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, github.ErrorResponse{Message: "Problems parsing JSON"})
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.hasPull(rp, n) {
		writeJSON(w, http.StatusNotFound, github.ErrorResponse{Message: "Not Found"})
		return
	}
	for _, c := range req.Comments {
		if c.GetPath() == "" || c.GetBody() == "" || (c.GetLine() <= 0 && c.GetPosition() <= 0) {
			writeJSON(w, http.StatusUnprocessableEntity, github.ErrorResponse{Message: "Unprocessable Entity"})
			return
		}
	}
	rp.posted = append(rp.posted, PostedReview{Number: n, Review: req})
	id := g.nextID()
	writeJSON(w, http.StatusOK, github.PullRequestReview{ID: github.Ptr(id), User: appBot(), Body: req.Body,
		State: github.Ptr("COMMENTED"), CommitID: req.CommitID})
}

func (g *GitHub) createReply(w http.ResponseWriter, r *http.Request) {
	rp, _, ok := g.authRepo(w, r)
	if !ok {
		return
	}
	n, _ := strconv.Atoi(r.PathValue("n"))
	var body struct {
		Body      string `json:"body"`
		InReplyTo int64  `json:"in_reply_to"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Body == "" {
		writeJSON(w, http.StatusUnprocessableEntity, github.ErrorResponse{Message: "Validation Failed"})
		return
	}
	// A reply is POST .../comments/{id}/replies, or POST .../comments
	// naming in_reply_to; a new comment without either is not one the host
	// makes.
	to, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if to == 0 {
		to = body.InReplyTo
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var parent *github.PullRequestComment
	for _, rv := range rp.reviews {
		for _, nt := range rv.notes {
			if nt.GetID() == to && rv.number == n {
				parent = nt
			}
		}
	}
	if parent == nil {
		writeJSON(w, http.StatusNotFound, github.ErrorResponse{Message: "Not Found"})
		return
	}
	rp.replies = append(rp.replies, PostedReply{Number: n, To: to, Body: body.Body})
	writeJSON(w, http.StatusCreated, github.PullRequestComment{ID: github.Ptr(g.nextID()), InReplyTo: github.Ptr(to),
		Path: parent.Path, Line: parent.Line, Body: github.Ptr(body.Body), User: appBot()})
}

func (g *GitHub) addLabels(w http.ResponseWriter, r *http.Request) {
	rp, _, ok := g.authRepo(w, r)
	if !ok {
		return
	}
	n, _ := strconv.Atoi(r.PathValue("n"))
	// GitHub takes {"labels": [...]} or the bare list go-github sends.
	var raw json.RawMessage
	var body struct {
		Labels []string `json:"labels"`
	}
	if err := json.NewDecoder(r.Body).Decode(&raw); err != nil ||
		(json.Unmarshal(raw, &body.Labels) != nil && json.Unmarshal(raw, &body) != nil) {
		writeJSON(w, http.StatusUnprocessableEntity, github.ErrorResponse{Message: "Validation Failed"})
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	is := g.issue(rp, n)
	for _, l := range body.Labels {
		if !slices.ContainsFunc(is.issue.Labels, func(x *github.Label) bool { return x.GetName() == l }) {
			is.issue.Labels = append(is.issue.Labels, &github.Label{Name: github.Ptr(l)})
		}
	}
	writeJSON(w, http.StatusOK, is.issue.Labels)
}

func (g *GitHub) removeLabel(w http.ResponseWriter, r *http.Request) {
	rp, _, ok := g.authRepo(w, r)
	if !ok {
		return
	}
	n, _ := strconv.Atoi(r.PathValue("n"))
	label := r.PathValue("label")
	g.mu.Lock()
	defer g.mu.Unlock()
	is := g.issue(rp, n)
	i := slices.IndexFunc(is.issue.Labels, func(x *github.Label) bool { return x.GetName() == label })
	if i < 0 {
		writeJSON(w, http.StatusNotFound, github.ErrorResponse{Message: "Label does not exist"})
		return
	}
	is.issue.Labels = slices.Delete(is.issue.Labels, i, i+1)
	writeJSON(w, http.StatusOK, is.issue.Labels)
}

// hasPull reports whether rp has pull request n. The caller holds g.mu.
func (g *GitHub) hasPull(rp *ghRepo, n int) bool {
	return slices.ContainsFunc(rp.pulls, func(pr *github.PullRequest) bool { return pr.GetNumber() == n })
}

// refreshPull follows a same-repository pull request's head branch, as
// GitHub does on a push: its head commit and refs/pull/<n>/head.
func (g *GitHub) refreshPull(repo string, pr *github.PullRequest) {
	if pr.GetHead().GetRepo().GetFullName() != repo {
		return
	}
	sha := g.git.Head(g.t, repo, pr.GetHead().GetRef())
	if sha == "" || sha == pr.GetHead().GetSHA() {
		return
	}
	pr.Head.SHA = github.Ptr(sha)
	_ = gitCmd(g.git.Dir(repo), "update-ref", fmt.Sprintf("refs/pull/%d/head", pr.GetNumber()), sha).Run()
}

// ReviewNoteIDs are the ids of the inline comments of review id of repo.
func (g *GitHub) ReviewNoteIDs(repo string, id int64) []int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []int64
	if rv := g.repos[repo].reviews[id]; rv != nil {
		for _, nt := range rv.notes {
			out = append(out, nt.GetID())
		}
	}
	return out
}

// SetPullHeadRepo makes pull request n of repo come from headRepo, a fork.
func (g *GitHub) SetPullHeadRepo(repo string, n int, headRepo string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, pr := range g.repos[repo].pulls {
		if pr.GetNumber() == n {
			pr.Head.Repo = &github.Repository{FullName: github.Ptr(headRepo)}
		}
	}
}
