package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"

	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
)

// giteaDelivery is one webhook delivery a real Gitea sent: its
// X-Gitea-Event header (what the receiver parses by), X-Gitea-Event-Type
// (which tells a label change from the issues event it is sent as) and
// X-Gitea-Delivery.
type giteaDelivery struct {
	header, eventType, id string
	body                  []byte
	repo, action          string
	number, comment       int64 // the issue or pull request, the comment (0: none)
}

// giteaHooks receives a Gitea's webhook deliveries on loopback, as a
// receiver would.
type giteaHooks struct {
	URL string
	mu  sync.Mutex
	got []giteaDelivery
}

func startGiteaHooks(t *testing.T) *giteaHooks {
	t.Helper()
	h := &giteaHooks{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var p struct {
			Action string `json:"action"`
			Number int64  `json:"number"`
			Issue  *struct {
				Number int64 `json:"number"`
			} `json:"issue"`
			Comment *struct {
				ID int64 `json:"id"`
			} `json:"comment"`
			Repository struct {
				FullName string `json:"full_name"`
			} `json:"repository"`
		}
		_ = json.Unmarshal(body, &p)
		d := giteaDelivery{header: r.Header.Get("X-Gitea-Event"), eventType: r.Header.Get("X-Gitea-Event-Type"),
			id: r.Header.Get("X-Gitea-Delivery"), body: body, repo: p.Repository.FullName, action: p.Action, number: p.Number}
		if p.Issue != nil {
			d.number = p.Issue.Number
		}
		if p.Comment != nil {
			d.comment = p.Comment.ID
		}
		h.mu.Lock()
		h.got = append(h.got, d)
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	h.URL = srv.URL + "/forgejo"
	return h
}

// wait is the delivery of eventType (X-Gitea-Event-Type) with action about
// number of repo (and, when comment is not 0, about that comment), once
// Gitea has sent it. The host's own comments on the issue are deliveries
// too, so a comment's is told by its id.
func (h *giteaHooks) wait(t *testing.T, repo, eventType, action string, number, comment int64) giteaDelivery {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		h.mu.Lock()
		for _, d := range h.got {
			if d.repo == repo && d.eventType == eventType && d.action == action && d.number == number && (comment == 0 || d.comment == comment) {
				h.mu.Unlock()
				return d
			}
		}
		var seen []string
		for _, d := range h.got {
			seen = append(seen, fmt.Sprintf("%s %s/%s #%d", d.repo, d.eventType, d.action, d.number))
		}
		h.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("Gitea sent no %s/%s delivery about %s#%d; it sent %v", eventType, action, repo, number, seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// event is the delivery as the receiver reads it (its X-Gitea-Event and
// X-Gitea-Delivery headers, forge.ParseForgejo).
func (d giteaDelivery) event(t *testing.T) forge.Event {
	t.Helper()
	ev, err := forge.ParseForgejo(d.header, d.id, d.body)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// fixModel is a model that does what an issue asks when it asks "Please
// change FILE so it says: TEXT": read from the request it is sent (the
// prompt's issue body, the tool results so far), it writes TEXT to
// /workspace/FILE, then /job/out/pr.md titled title, then answers. Any
// other request gets a final answer that changes nothing.
func fixModel(title string) func(body []byte) fakeprovider.Step {
	ask := regexp.MustCompile(`(?m)^Please change ([A-Za-z0-9._-]+) so it says: ([^\n]+)$`)
	u := fakeprovider.Usage{Input: 1500, Output: 40}
	return func(body []byte) fakeprovider.Step {
		prompt, err := userText(body)
		if err != nil {
			return fakeprovider.Answer("unreadable request: "+err.Error(), u)
		}
		m := ask.FindStringSubmatch(prompt)
		if m == nil {
			return fakeprovider.Answer("Read the request; nothing to change.", u)
		}
		var req anthropicRequest
		_ = json.Unmarshal(body, &req)
		turns := 0
		for _, msg := range req.Messages {
			if msg.Role == "assistant" {
				turns++
			}
		}
		if failed := strings.Contains(string(body), `"is_error":true`); failed {
			return fakeprovider.Answer("A tool call failed; I changed nothing more.", u)
		}
		switch turns {
		case 0:
			return fakeprovider.WriteFile("/workspace/"+m[1], m[2]+"\n", u)
		case 1:
			return fakeprovider.WriteFile("/job/out/pr.md", title+"\n\nChanges "+m[1]+" to say what the issue asks.\n", u)
		default:
			return fakeprovider.Answer("Changed "+m[1]+" and wrote the pull request's text.", u)
		}
	}
}

// Against a real Gitea, with a worker wired as run wires it from FORGEJO_URL
// and FORGEJO_TOKEN: the owner's issue labelled, commented on and closed,
// each delivered by Gitea's own webhook and turned into a job as the
// receiver does; a pull request review with an inline comment; then an
// issue asking for a concrete change, which the scripted model makes by
// reading its prompt, and which the host publishes as the one pull request
// of its repository, titled from the job's pr.md.
func TestPromptGiteaTriggers(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	g := forgetest.StartGitea(t)
	admin, err := gitea.NewClient(g.URL, gitea.SetToken(g.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	me, _, err := admin.GetMyUserInfo()
	if err != nil {
		t.Fatal(err)
	}
	owner := g.AdminUser
	hooks := startGiteaHooks(t)
	greetName := "greet-" + randomHex(3)
	labels := map[string]int64{}
	for _, name := range []string{"web", greetName} {
		if _, _, err := admin.CreateRepo(gitea.CreateRepoOption{Name: name, AutoInit: true, DefaultBranch: "main", Readme: "Default"}); err != nil {
			t.Fatal(err)
		}
		l, _, err := admin.CreateLabel(owner, name, gitea.CreateLabelOption{Name: "pi:fix", Color: "#ee0701"})
		if err != nil {
			t.Fatal(err)
		}
		labels[name] = l.ID
		if _, _, err := admin.CreateRepoHook(owner, name, gitea.CreateHookOption{Type: gitea.HookTypeGitea, Active: true,
			Events: []string{"issues", "issue_comment", "pull_request"},
			Config: map[string]string{"url": hooks.URL, "content_type": "json", "secret": "prompt-" + randomHex(8)}}); err != nil {
			t.Fatal(err)
		}
	}
	// The host's token is a bot's: the owner is the person on the forge,
	// and what the host writes there (its comments, the pull request) is
	// the bot's. The bot is a repository admin, not a writer: Gitea
	// answers a collaborator's permission lookup only about themselves
	// (see the subtest PermissionLookupNeedsRepoAdmin), so a writer's token
	// would show every other person as "unknown".
	// Its token has exactly the scopes docs/forges.md names, nothing more:
	// the whole loop works with them.
	scoped := g.CreateScopedUser(t, "pi-bot")
	bot := forgetest.GiteaUser{ID: scoped.ID, Login: scoped.Login,
		Token: scoped.Token(t, "host", "write:repository", "write:issue", "read:user")}
	writer := g.CreateUser(t, "pi-writer", false)
	for _, c := range []struct {
		login string
		mode  gitea.AccessMode
	}{{bot.Login, gitea.AccessModeAdmin}, {writer.Login, gitea.AccessModeWrite}} {
		for _, name := range []string{"web", greetName} {
			if _, err := admin.AddCollaborator(owner, name, c.login, gitea.AddCollaboratorOption{Permission: &c.mode}); err != nil {
				t.Fatal(err)
			}
		}
	}
	web, greet := owner+"/web", owner+"/"+greetName
	file := "greeting-" + randomHex(3) + ".txt"
	text := fmt.Sprintf("Hello from Gitea %d", 1000+rand.IntN(9000))
	prTitle := "Make the greeting say hello " + randomHex(3)
	if _, _, err := admin.CreateFile(owner, greetName, file, gitea.CreateFileOptions{
		FileOptions: gitea.FileOptions{BranchName: "main", Message: "Add the greeting"},
		Content:     base64.StdEncoding.EncodeToString([]byte("Hello\n")),
	}); err != nil {
		t.Fatal(err)
	}

	instr := map[string]string{}
	for _, id := range []string{"fj-label", "fj-comment", "fj-close", "fj-pr"} {
		instr[id] = "Operator rule " + randomHex(6) + " for " + id + ": touch only what the request names."
	}
	const phrase = "/pi explain"
	triggers := forgeTriggersFile(t, "forgejo", []promptTrigger{
		{On: map[string]any{"type": "label", "id": "fj-label", "repos": []string{web, greet}, "any": []string{"pi:fix"}}, Flow: "fix",
			Instructions: instr["fj-label"], Publish: map[string]any{"draft": false}},
		{On: map[string]any{"type": "comment", "id": "fj-comment", "repos": []string{web}, "phrase": phrase}, Flow: "answer", Instructions: instr["fj-comment"]},
		{On: map[string]any{"type": "issue", "id": "fj-close", "repos": []string{web}}, Flow: "plan", Instructions: instr["fj-close"]},
		{On: map[string]any{"type": "pull_request", "id": "fj-pr", "repos": []string{web}, "actions": []string{"opened"}}, Flow: "review", Instructions: instr["fj-pr"]},
	})
	r := bootPromptRig(t, db, "prompt-fj", triggers, map[string]string{"FORGEJO_URL": g.URL, "FORGEJO_TOKEN": bot.Token}, fixModel(prTitle))

	is, _, err := admin.CreateIssue(owner, "web", gitea.CreateIssueOption{Title: "The widget wobbles " + randomHex(2),
		Body: "It wobbles when spun, since release " + randomHex(3) + "."})
	if err != nil {
		t.Fatal(err)
	}
	n := strconv.FormatInt(is.Index, 10)
	title := func(state string) eventPart {
		return newEventPart(`^issue #`+n+` \(`+state+`\) title, by `+owner+` \(admin\)$`, is.Title)
	}
	body := func(state string) eventPart {
		return newEventPart(`^issue #`+n+` \(`+state+`\) body, by `+owner+` \(admin\)$`, is.Body)
	}

	t.Run("Label", func(t *testing.T) {
		if _, _, err := admin.AddIssueLabels(owner, "web", is.Index, gitea.IssueLabelsOption{Labels: []int64{labels["web"]}}); err != nil {
			t.Fatal(err)
		}
		run := r.run(t, hooks.wait(t, web, "issue_label", "label_updated", is.Index, 0).event(t), "fj-label")
		run.checkOrder(t, instr["fj-label"], "fix", title("open"), body("open"),
			newEventPart(`^label added, by `+owner+` \(admin\)$`, "pi:fix"))
	})

	t.Run("Comment", func(t *testing.T) {
		asked := "why does it wobble only when spun " + randomHex(2) + "?"
		cm, _, err := admin.CreateIssueComment(owner, "web", is.Index, gitea.CreateIssueCommentOption{Body: phrase + " " + asked})
		if err != nil {
			t.Fatal(err)
		}
		run := r.run(t, hooks.wait(t, web, "issue_comment", "created", is.Index, cm.ID).event(t), "fj-comment")
		run.checkOrder(t, instr["fj-comment"], "answer", title("open"), body("open"),
			newEventPart(`^comment that started this job, by `+owner+` \(admin\), at 2\d\d\d-`, asked))
	})

	t.Run("Close", func(t *testing.T) {
		closed := gitea.StateClosed
		if _, _, err := admin.EditIssue(owner, "web", is.Index, gitea.EditIssueOption{State: &closed}); err != nil {
			t.Fatal(err)
		}
		run := r.run(t, hooks.wait(t, web, "issues", "closed", is.Index, 0).event(t), "fj-close")
		run.checkOrder(t, instr["fj-close"], "plan", title("closed"), body("closed"))
	})

	t.Run("Review", func(t *testing.T) {
		if _, _, err := admin.CreateFile(owner, "web", "wobble.go", gitea.CreateFileOptions{
			FileOptions: gitea.FileOptions{BranchName: "main", NewBranchName: "steady", Message: "Steady the widget"},
			Content:     base64.StdEncoding.EncodeToString([]byte("package wobble\n\nfunc Steady() {}\n")),
		}); err != nil {
			t.Fatal(err)
		}
		pr, _, err := admin.CreatePullRequest(owner, "web", gitea.CreatePullRequestOption{Head: "steady", Base: "main",
			Title: "Steady the widget " + randomHex(2), Body: "Adds Steady."})
		if err != nil {
			t.Fatal(err)
		}
		reviewBody := "Two notes before this goes in " + randomHex(3) + "."
		review, _, err := admin.CreatePullReview(owner, "web", pr.Index, gitea.CreatePullReviewOptions{
			State: gitea.ReviewStateComment, Body: reviewBody,
			Comments: []gitea.CreatePullReviewComment{{Path: "wobble.go", Body: "Say what it steadies.", NewLineNum: 3}},
		})
		if err != nil {
			t.Fatal(err)
		}
		// Forgejo's and Gitea's review deliveries start no job (the
		// receiver reads none: docs/forges.md lists no review action for
		// forgejo), so the review rides on Gitea's own delivery of the
		// pull request's opening, with the review's id added: the job the
		// worker would be given for it.
		ev := hooks.wait(t, web, "pull_request", "opened", pr.Index, 0).event(t)
		if ev.SenderID != me.ID {
			t.Fatalf("the delivery's sender %d, the owner is %d", ev.SenderID, me.ID)
		}
		ev.ReviewID = review.ID
		run := r.run(t, ev, "fj-pr")
		num := strconv.FormatInt(pr.Index, 10)
		run.checkOrder(t, instr["fj-pr"], "review",
			newEventPart(`^pull request #`+num+` \(open\) title, by `+owner+` \(admin\)$`, pr.Title),
			newEventPart(`^pull request #`+num+` \(open\) body, by `+owner+` \(admin\)$`, pr.Body),
			newEventPart(`^pull request #`+num+` \(open\) changed files, by `+owner+` \(admin\)$`, "added wobble.go (+3 -0)"),
			newEventPart(`^review that started this job \(commented\), by `+owner+` \(admin\)$`, reviewBody),
			newEventPart(`^inline comment 1 of 1 on that review, by `+owner+` \(admin\)$`, "file: wobble.go, line 3\n\nSay what it steadies."))
	})

	// The issue asks for a change; the model reads what to change from its
	// prompt and makes it; the host opens the repository's one pull
	// request, titled from pr.md (the trigger publishes ready, not draft).
	t.Run("FixOpensPullRequest", func(t *testing.T) {
		ask, _, err := admin.CreateIssue(owner, greetName, gitea.CreateIssueOption{Title: "Update the greeting",
			Body: "Please change " + file + " so it says: " + text + "\n\nThanks!"})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := admin.AddIssueLabels(owner, greetName, ask.Index, gitea.IssueLabelsOption{Labels: []int64{labels[greetName]}}); err != nil {
			t.Fatal(err)
		}
		run := r.run(t, hooks.wait(t, greet, "issue_label", "label_updated", ask.Index, 0).event(t), "fj-label")
		an := strconv.FormatInt(ask.Index, 10)
		run.checkOrder(t, instr["fj-label"], "fix",
			newEventPart(`^issue #`+an+` \(open\) title, by `+owner+` \(admin\)$`, ask.Title),
			newEventPart(`^issue #`+an+` \(open\) body, by `+owner+` \(admin\)$`, ask.Body))
		if len(run.requests) != 3 {
			t.Fatalf("%d model requests, want 3 (write the file, write pr.md, answer)", len(run.requests))
		}

		prs, _, err := admin.ListRepoPullRequests(owner, greetName, gitea.ListPullRequestsOptions{State: gitea.StateAll})
		if err != nil {
			t.Fatal(err)
		}
		if len(prs) != 1 {
			t.Fatalf("%d pull requests on %s, want exactly one; record %+v", len(prs), greet, run.rec)
		}
		pr := prs[0]
		if pr.Title != prTitle || pr.HTMLURL != run.rec.PullRequestURL || pr.Base.Ref != "main" || pr.Head.Ref != fmt.Sprintf("pi/issue-%d", ask.Index) {
			t.Errorf("pull request %q (%s, %s <- %s), want %q, the record's %s", pr.Title, pr.HTMLURL, pr.Base.Ref, pr.Head.Ref, prTitle, run.rec.PullRequestURL)
		}
		if !strings.Contains(pr.Body, "Refs #"+an) || !strings.HasPrefix(pr.Body, "Changes "+file+" to say what the issue asks.") {
			t.Errorf("pull request body %q, want pr.md's body and Refs #%s", pr.Body, an)
		}
		files, _, err := admin.ListPullRequestFiles(owner, greetName, pr.Index, gitea.ListPullRequestFilesOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != 1 || files[0].Filename != file || files[0].Additions != 1 || files[0].Deletions != 1 {
			var got []string
			for _, f := range files {
				got = append(got, fmt.Sprintf("%s %s +%d -%d", f.Status, f.Filename, f.Additions, f.Deletions))
			}
			t.Fatalf("the pull request changes %v, want %s alone", got, file)
		}
		after, _, err := admin.GetFile(owner, greetName, pr.Head.Sha, file)
		if err != nil || string(after) != text+"\n" {
			t.Fatalf("%s on the pull request's head: %q (%v), want %q", file, after, err, text+"\n")
		}
		if before, _, err := admin.GetFile(owner, greetName, "main", file); err != nil || string(before) != "Hello\n" {
			t.Fatalf("%s on main: %q (%v)", file, before, err)
		}
		diff := giteaGet(t, g.URL+"/"+greet+"/pulls/"+strconv.FormatInt(pr.Index, 10)+".diff")
		if strings.Count(diff, "diff --git ") != 1 || !strings.Contains(diff, "diff --git a/"+file+" b/"+file+"\n") ||
			!strings.Contains(diff, "\n-Hello\n+"+text+"\n") {
			t.Fatalf("the pull request's diff:\n%s", diff)
		}
		if run.rec.PushedCommit != pr.Head.Sha {
			t.Errorf("record's pushed commit %s, the pull request's head %s", run.rec.PushedCommit, pr.Head.Sha)
		}
	})

	// The receiver's permission check (and the worker's lookups for the
	// event) with FORGEJO_TOKEN: the owner's event is allowed through a
	// repository admin's token, and cannot be decided through a writer's,
	// which Gitea answers 403 about anyone else: the receiver would refuse
	// every event as permission-unknown.
	t.Run("PermissionLookupNeedsRepoAdmin", func(t *testing.T) {
		ev := forge.Event{Forge: jobs.ForgeForgejo, DeliveryID: "perm-" + randomHex(4), Kind: forge.KindLabel, Action: "label_updated",
			Repo: web, Number: int(is.Index), SenderID: me.ID, SenderLogin: owner, Added: []string{"pi:fix"}}
		for _, c := range []struct {
			who, token string
			allowed    bool
			err        error
		}{{bot.Login, bot.Token, true, nil}, {writer.Login, writer.Token, false, forge.ErrLookupForbidden}} {
			ok, err := forge.ForgejoPermissions{BaseURL: g.URL, Tokens: forge.StaticToken(c.token)}.Allowed(context.Background(), ev, forge.NeedTriage)
			if ok != c.allowed || !errors.Is(err, c.err) {
				t.Errorf("the owner's event through %s's token: allowed %v, %v; want %v, %v", c.who, ok, err, c.allowed, c.err)
			}
		}
	})

	t.Run("OnePullRequestOnly", func(t *testing.T) {
		// The jobs that changed nothing opened none: the web repository
		// holds only the pull request the test opened.
		prs, _, err := admin.ListRepoPullRequests(owner, "web", gitea.ListPullRequestsOptions{State: gitea.StateAll})
		if err != nil || len(prs) != 1 || strings.HasPrefix(prs[0].Head.Ref, "pi/") {
			t.Fatalf("pull requests on %s: %d (%v)", web, len(prs), err)
		}
		// And the host wrote as its bot: the status comments of the four
		// jobs on the web repository's issue and pull request.
		for _, n := range []int64{is.Index, prs[0].Index} {
			cms, _, err := admin.ListIssueComments(owner, "web", n, gitea.ListIssueCommentOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cms {
				if strings.Contains(c.Body, "pidispatch:status") && c.Poster.UserName != bot.Login {
					t.Errorf("the host's comment %q is by %s", c.Body, c.Poster.UserName)
				}
			}
		}
	})
}

// giteaGet reads a page of Gitea's web side (a public repository's).
func giteaGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}
