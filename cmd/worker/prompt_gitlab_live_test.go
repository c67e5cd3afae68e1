package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	gitlab "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/forgetest"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
)

// glPayload is a GitLab delivery as the receiver reads it: the recorded
// example, parsed with GitLab's client library.
func glPayload(t *testing.T, event gitlab.EventType, body []byte) forge.Event {
	t.Helper()
	ev, err := forge.ParseGitLab(string(event), "prompt-"+randomHex(8), body)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// For each GitLab trigger type (a label, a comment, an issue closed), the
// recorded example delivery becomes a job on the GitLab double, which holds
// the issue, its note and its label event; the real agent image asks the
// fake provider, and the first model request holds, in order, the trigger's
// instructions, the flow's template and the event's parts, each fenced as
// untrusted. GitLab has no review with a body and inline comments (its
// merge request approvals carry neither), so there is no review case here.
func TestPromptGitLabTriggers(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	issueBody := fixtures.File(t, "gitlab", "issue.json")
	noteBody := fixtures.File(t, "gitlab", "note_issue.json")
	var is gitlab.IssueEvent
	var nt gitlab.IssueCommentEvent
	if err := json.Unmarshal(issueBody, &is); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(noteBody, &nt); err != nil {
		t.Fatal(err)
	}
	issueRepo, noteRepo := is.Project.PathWithNamespace, nt.Project.PathWithNamespace

	git := forgetest.StartGitServer(t, nil)
	gl := forgetest.StartGitLab(t, git)
	for _, repo := range []string{issueRepo, noteRepo} {
		git.CreateRepo(t, repo, "main", map[string]string{"README.md": "gitlab-test\n"})
		gl.AddProject(repo, "main")
	}
	// Each example's project, under the id it names.
	gl.SetProjectID(issueRepo, fixtures.RepoID(t, issueBody))
	gl.SetProjectID(noteRepo, fixtures.RepoID(t, noteBody))
	// The issue and the label it was opened with, by the user the example
	// names; the noted issue and the note, under the id the double gave it.
	iid := int(is.ObjectAttributes.IID)
	label := is.Labels[0].Title
	gl.AddIssue(issueRepo, iid, is.User.Username, is.ObjectAttributes.Title, is.ObjectAttributes.Description, label)
	gl.AddLabelEvent(issueRepo, "issue/"+strconv.Itoa(iid), is.User.Username, label)
	gl.SetMember(issueRepo, is.User.Username, gitlab.MaintainerPermissions)
	noted := int(nt.Issue.IID)
	gl.AddIssue(noteRepo, noted, nt.User.Username, nt.Issue.Title, nt.Issue.Description)
	noteID := gl.AddNote(noteRepo, "issue/"+strconv.Itoa(noted), nt.User.Username, nt.ObjectAttributes.Note, false)
	gl.SetMember(noteRepo, nt.User.Username, gitlab.DeveloperPermissions)
	noteBody = fixtures.Edit(t, noteBody, func(m map[string]any) { m["object_attributes"].(map[string]any)["id"] = noteID })

	repos := []string{issueRepo, noteRepo}
	instr := map[string]string{}
	for _, id := range []string{"gl-label", "gl-comment", "gl-close"} {
		instr[id] = "Operator rule " + randomHex(6) + " for " + id + ": reply in two sentences at most."
	}
	phrase, _, _ := strings.Cut(nt.ObjectAttributes.Note, " ") // "Hello" of "Hello world"
	triggers := forgeTriggersFile(t, "gitlab", []promptTrigger{
		{On: map[string]any{"type": "label", "id": "gl-label", "repos": repos, "any": []string{label}}, Flow: "fix", Instructions: instr["gl-label"]},
		{On: map[string]any{"type": "comment", "id": "gl-comment", "repos": repos, "phrase": phrase}, Flow: "answer", Instructions: instr["gl-comment"]},
		{On: map[string]any{"type": "issue", "id": "gl-close", "repos": repos}, Flow: "plan", Instructions: instr["gl-close"]},
	})
	r := bootPromptRig(t, db, "prompt-gl", triggers, map[string]string{"GITLAB_URL": gl.URL, "GITLAB_TOKEN": gl.Parent}, nil)

	n := strconv.Itoa(iid)
	title := newEventPart(`^issue #`+n+` \(opened\) title, by root \(maintain\)$`, is.ObjectAttributes.Title)
	body := newEventPart(`^issue #`+n+` \(opened\) body, by root \(maintain\)$`, is.ObjectAttributes.Description)

	t.Run("Label", func(t *testing.T) {
		run := r.run(t, glPayload(t, gitlab.EventTypeIssue, issueBody), "gl-label")
		run.checkOrder(t, instr["gl-label"], "fix", title, body,
			newEventPart(`^issue #`+n+` \(opened\) labels, as the repository names them$`, label),
			newEventPart(`^label added, by root \(maintain\)$`, label))
	})

	t.Run("Comment", func(t *testing.T) {
		asked := strings.TrimSpace(strings.Replace(nt.ObjectAttributes.Note, phrase, "", 1))
		if asked == "" || strings.Contains(asked, phrase) {
			t.Fatalf("the example's note %q does not hold the phrase %q once", nt.ObjectAttributes.Note, phrase)
		}
		m := strconv.Itoa(noted)
		run := r.run(t, glPayload(t, gitlab.EventTypeNote, noteBody), "gl-comment")
		run.checkOrder(t, instr["gl-comment"], "answer",
			newEventPart(`^issue #`+m+` \(opened\) title, by user1 \(write\)$`, nt.Issue.Title),
			newEventPart(`^issue #`+m+` \(opened\) body, by user1 \(write\)$`, nt.Issue.Description),
			newEventPart(`^comment that started this job, by user1 \(write\), at 2\d\d\d-`, asked))
		if run.event.Comment == nil || run.event.Comment.ID != noteID {
			t.Fatalf("event.json's comment %+v, want note %d", run.event.Comment, noteID)
		}
	})

	t.Run("Close", func(t *testing.T) {
		payload := fixtures.Edit(t, issueBody, func(m map[string]any) {
			oa := m["object_attributes"].(map[string]any)
			oa["action"], oa["state"] = "close", "closed"
		})
		run := r.run(t, glPayload(t, gitlab.EventTypeIssue, payload), "gl-close")
		run.checkOrder(t, instr["gl-close"], "plan", title, body)
		if run.event.Label != nil || run.event.Comment != nil {
			t.Fatalf("a close shows no label or comment: %+v", run.event)
		}
	})
}
