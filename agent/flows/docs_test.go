package flows_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/agent/flows"
	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/jobs"
)

var updateDocs = flag.Bool("update", false, "rewrite the example events and prompts of docs/forges.md from this run")

// forgesDoc is the page whose examples TestForgesDoc_Examples keeps true.
var forgesDoc = filepath.Join("..", "..", "docs", "forges.md")

// docNonce is the examples' nonce. A host picks a new one for every job
// (flows.NewNonce); the page says so.
const docNonce = "5f2c7e9a1b3d4c6e8f0a2b4c6d8e0f1a"

// docExample is one example of docs/forges.md: the trigger it names (a
// hand-written block of the page), the flow that trigger runs, and the
// event the host would read for it.
type docExample struct {
	name  string // the marker's word: <!-- example: NAME event -->
	flow  string
	event jobs.Event
}

func person(login, permission string) jobs.EventPerson {
	return jobs.EventPerson{Login: login, Permission: permission}
}

// docExamples are the page's examples, one per kind of event: a label, a
// comment, a review with inline comments, a close.
func docExamples() []docExample {
	alice, bob := person("alice", "write"), person("bob", "maintain")
	return []docExample{
		{name: "label", flow: "fix", event: jobs.Event{
			Version: jobs.EventVersion,
			Forge:   jobs.ForgeGitHub,
			Repository: jobs.EventRepository{FullName: "acme/api", URL: "https://github.com/acme/api",
				DefaultBranch: "main"},
			Trigger: jobs.EventTrigger{Name: "fix-on-pr-label", Type: "pull_request",
				Instructions: "Keep the change inside internal/client. Add no dependency."},
			Issue: &jobs.EventIssue{
				Number: 41,
				Title:  "Retry 429 answers in the HTTP client",
				Body: "The client gives up on the first 429. It should wait for Retry-After and try again, " +
					"at most 3 times.\n\nThe new test in internal/client/retry_test.go fails until it does.",
				State:  "open",
				URL:    "https://github.com/acme/api/pull/41",
				Author: alice,
				Labels: []string{"bug", "pi:fix"},
			},
			PullRequest: &jobs.EventPullRequest{
				Base: "main", Head: "alice/retry-429", HeadSHA: "9f1c2e4a7b3d5f60718293a4b5c6d7e8f9012345",
				Files: []jobs.EventFile{
					{Path: "internal/client/retry_test.go", Status: "added", Additions: 48},
				},
			},
			Comments: []jobs.EventComment{{ID: 1201, Author: person("carol", "read"),
				Body: "Does this cover 503 answers too?", CreatedAt: "2025-06-02T09:14:00Z"}},
			Label: &jobs.EventLabel{Name: "pi:fix", AddedBy: person("dave", "triage")},
		}},
		{name: "comment", flow: "answer", event: jobs.Event{
			Version: jobs.EventVersion,
			Forge:   jobs.ForgeForgejo,
			Repository: jobs.EventRepository{FullName: "acme/widgets", URL: "https://codeberg.org/acme/widgets",
				DefaultBranch: "main"},
			Trigger: jobs.EventTrigger{Name: "ask", Type: "comment"},
			Issue: &jobs.EventIssue{
				Number: 12,
				Title:  "Cache rendered thumbnails",
				Body:   "Thumbnails are rendered on every request. This keeps them on disk, keyed by path and mtime.",
				State:  "open",
				URL:    "https://codeberg.org/acme/widgets/pulls/12",
				Author: person("erin", "write"),
				Labels: []string{"performance"},
			},
			PullRequest: &jobs.EventPullRequest{
				Base: "main", Head: "thumb-cache", HeadSHA: "3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f",
				Files: []jobs.EventFile{
					{Path: "thumbs/cache.go", Status: "added", Additions: 120},
					{Path: "thumbs/render.go", Status: "changed", Additions: 9, Deletions: 4},
				},
			},
			Comment: &jobs.EventComment{ID: 3301, Author: person("frank", "write"),
				Body:      "Why is the cache keyed by mtime rather than by a hash of the file?",
				CreatedAt: "2025-06-03T14:02:11Z"},
			Comments: []jobs.EventComment{
				{ID: 3290, Author: person("grace", "none"), Body: "This halves the page load for me.",
					CreatedAt: "2025-06-03T10:40:52Z"},
				{ID: 3297, Author: person("erin", "write"), Body: "Thanks! The numbers are in the description.",
					CreatedAt: "2025-06-03T11:05:30Z"},
			},
		}},
		{name: "review", flow: "fix", event: jobs.Event{
			Version: jobs.EventVersion,
			Forge:   jobs.ForgeGitHub,
			Repository: jobs.EventRepository{FullName: "acme/api", URL: "https://github.com/acme/api",
				DefaultBranch: "main"},
			Trigger: jobs.EventTrigger{Name: "fix-on-review", Type: "pull_request"},
			Issue: &jobs.EventIssue{
				Number: 44,
				Title:  "Paginate GET /orders",
				Body:   "Adds limit and cursor parameters to GET /orders.",
				State:  "open",
				URL:    "https://github.com/acme/api/pull/44",
				Author: alice,
			},
			PullRequest: &jobs.EventPullRequest{
				Base: "main", Head: "alice/orders-pages", HeadSHA: "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",
				Files: []jobs.EventFile{
					{Path: "api/orders.go", Status: "modified", Additions: 31, Deletions: 6},
					{Path: "api/orders_test.go", Status: "modified", Additions: 22},
				},
			},
			Review: &jobs.EventReview{
				ID: 88001, State: "changes_requested", Author: bob,
				Body: "Two things before this can merge.",
				Comments: []jobs.EventReviewNote{
					{ID: 90011, Path: "api/orders.go", Line: 57, Author: bob,
						Body: "The limit has no cap: `?limit=1000000` reads the whole table. Cap it at 100."},
					{ID: 90012, Path: "api/orders_test.go", Line: 12, Author: bob,
						Body: "Add a test for the last page, whose `next` must be empty."},
				},
			},
		}},
		{name: "close", flow: "plan", event: jobs.Event{
			Version: jobs.EventVersion,
			Forge:   jobs.ForgeGitHub,
			Repository: jobs.EventRepository{FullName: "acme/api", URL: "https://github.com/acme/api",
				DefaultBranch: "main"},
			Trigger: jobs.EventTrigger{Name: "plan-after-design", Type: "issue",
				Instructions: "Plan the work the design below leaves to do, in steps of one pull request each."},
			Issue: &jobs.EventIssue{
				Number: 57,
				Title:  "Design: move the job queue to streams",
				Body:   "Adds docs/design/streams.md: why the queue moves from lists to streams, and in which order.",
				State:  "closed",
				URL:    "https://github.com/acme/api/pull/57",
				Author: bob,
				Labels: []string{"design"},
			},
			PullRequest: &jobs.EventPullRequest{
				Base: "main", Head: "design/streams", HeadSHA: "7e8f9a0b1c2d3e4f5061728394a5b6c7d8e9f0a1",
				Files: []jobs.EventFile{{Path: "docs/design/streams.md", Status: "added", Additions: 164}},
			},
			Comments: []jobs.EventComment{
				{ID: 1377, Author: alice, Body: "Agreed on the order. Consumer groups come last.",
					CreatedAt: "2025-06-05T16:20:03Z"},
				{ID: 1381, Author: bob, Body: "Merging; the follow-ups get their own pull requests.",
					CreatedAt: "2025-06-06T08:01:47Z"},
			},
			CommentsOmitted: 4,
		}},
	}
}

// TestForgesDoc_Examples holds docs/forges.md to what the host writes: each
// example's event.json is the event as the worker marshals it, its prompt is
// Render's for the flow its trigger names, and its trigger block parses as a
// forge trigger giving the event's trigger section. With -update it
// rewrites the event and prompt blocks of the page instead.
func TestForgesDoc_Examples(t *testing.T) {
	raw, err := os.ReadFile(forgesDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, ex := range docExamples() {
		flow, ok := flows.Builtin().Lookup(ex.flow)
		if !ok {
			t.Fatalf("%s: no built-in flow %q", ex.name, ex.flow)
		}
		ev := ex.event
		event, err := json.MarshalIndent(&ev, "", "  ") // as dispatch's writeJSON writes /job/event.json
		if err != nil {
			t.Fatal(err)
		}
		prompt, err := flows.Render(flows.Input{Flow: flow, Instructions: ev.Trigger.Instructions, Event: &ev, Nonce: docNonce})
		if err != nil {
			t.Fatalf("%s: %v", ex.name, err)
		}
		for _, want := range []struct{ part, info, text string }{
			{"event", "json", string(event) + "\n"},
			{"prompt", "markdown", prompt},
		} {
			marker := fmt.Sprintf("<!-- example: %s %s -->", ex.name, want.part)
			b, err := findBlock(doc, marker)
			switch {
			case err != nil:
				t.Errorf("%s: %v", forgesDoc, err)
			case *updateDocs:
				doc = doc[:b.start] + fenced(want.info, want.text) + doc[b.end:]
			case b.content != want.text:
				t.Errorf("%s: the block after %s is not what the host writes (go test ./agent/flows -run %s -update rewrites it):\n%s",
					forgesDoc, marker, t.Name(), firstDiff(b.content, want.text))
			}
		}
		checkTrigger(t, doc, ex)
	}
	if *updateDocs && doc != string(raw) {
		if err := os.WriteFile(forgesDoc, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the examples of %s", forgesDoc)
	}
}

// checkTrigger parses the example's trigger block as a triggers file and
// checks it is the trigger the event says started the job, running the
// example's flow on the event's forge and repository.
func checkTrigger(t *testing.T, doc string, ex docExample) {
	t.Helper()
	marker := fmt.Sprintf("<!-- example: %s trigger -->", ex.name)
	b, err := findBlock(doc, marker)
	if err != nil {
		t.Errorf("%s: %v", forgesDoc, err)
		return
	}
	fts, err := cronsync.ParseForgeTriggers([]byte(`{"triggers": [` + b.content + `]}`))
	if err != nil || len(fts) != 1 {
		t.Errorf("%s: the trigger after %s does not parse as one forge trigger: %v", forgesDoc, marker, err)
		return
	}
	ft, ev := fts[0], ex.event
	got := jobs.EventTrigger{Name: ft.Name, Type: ft.Type, Instructions: ft.Job.Instructions} // as the worker's triggers file answers it
	if got != ev.Trigger {
		t.Errorf("%s: the trigger after %s gives the event's trigger %+v, the example's event has %+v", forgesDoc, marker, got, ev.Trigger)
	}
	if ft.Job.Flow != ex.flow || ft.Forge != ev.Forge || !slices.Contains(ft.Repos, ev.Repository.FullName) {
		t.Errorf("%s: the trigger after %s runs flow %q on %s %v; the example renders flow %q on %s %s",
			forgesDoc, marker, ft.Job.Flow, ft.Forge, ft.Repos, ex.flow, ev.Forge, ev.Repository.FullName)
	}
}

// docBlock is a fenced code block of the page: the bytes from its opening
// fence to the end of its closing fence's line, and its content.
type docBlock struct {
	start, end int
	content    string
}

// findBlock finds the fenced code block on the line after marker, which
// must be on the page once. The block ends where CommonMark ends it: at a
// line of at least as many of the fence's character and nothing else.
func findBlock(doc, marker string) (docBlock, error) {
	if n := strings.Count(doc, marker); n != 1 {
		return docBlock{}, fmt.Errorf("%d lines %s, want 1", n, marker)
	}
	start := strings.Index(doc, marker) + len(marker)
	if !strings.HasPrefix(doc[start:], "\n") {
		return docBlock{}, fmt.Errorf("%s is not on a line of its own", marker)
	}
	start++
	lines := strings.SplitAfter(doc[start:], "\n")
	open := strings.TrimRight(lines[0], "\n")
	c, n := fenceRun(open)
	if n < 3 {
		return docBlock{}, fmt.Errorf("the line after %s opens no fenced block: %q", marker, open)
	}
	var content strings.Builder
	end := start + len(lines[0])
	for _, l := range lines[1:] {
		end += len(l)
		line := strings.TrimRight(l, "\n")
		if m, k := fenceRun(line); m == c && k >= n && strings.TrimSpace(line[k:]) == "" {
			return docBlock{start: start, end: end, content: content.String()}, nil
		}
		content.WriteString(l)
	}
	return docBlock{}, fmt.Errorf("the block after %s is never closed", marker)
}

// fenceRun is the character and length of the run of backticks or tildes a
// line starts with.
func fenceRun(line string) (byte, int) {
	if line == "" || (line[0] != '`' && line[0] != '~') {
		return 0, 0
	}
	n := 0
	for n < len(line) && line[n] == line[0] {
		n++
	}
	return line[0], n
}

// fenced is text in a block of backticks longer than any run of them in it.
func fenced(info, text string) string {
	longest, run := 0, 0
	for _, r := range text {
		if r == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", max(3, longest+1))
	return fence + info + "\n" + text + fence + "\n"
}

// firstDiff shows the first line where got and want part.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl || i >= len(g) || i >= len(w) {
			return fmt.Sprintf("line %d of the block:\n  page: %q\n  host: %q", i+1, gl, wl)
		}
	}
	return "(no line differs)"
}

// The examples show what the host would write: every text is as the host
// leaves it after clipping, and the event fits its bounds.
func TestForgesDoc_ExamplesAreClipped(t *testing.T) {
	t.Parallel()
	for _, ex := range docExamples() {
		data, err := json.Marshal(ex.event)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > jobs.MaxEventBytes {
			t.Errorf("%s: %d bytes, past %d", ex.name, len(data), jobs.MaxEventBytes)
		}
		if ex.event.Version != jobs.EventVersion {
			t.Errorf("%s: version %d", ex.name, ex.event.Version)
		}
		var texts []string
		if is := ex.event.Issue; is != nil {
			texts = append(texts, is.Title, is.Body)
		}
		if c := ex.event.Comment; c != nil {
			texts = append(texts, c.Body)
		}
		for _, c := range ex.event.Comments {
			texts = append(texts, c.Body)
		}
		if r := ex.event.Review; r != nil {
			texts = append(texts, r.Body)
			for _, n := range r.Comments {
				texts = append(texts, n.Body)
			}
		}
		for _, s := range texts {
			if jobs.Clip(s, len(s)) != s || strings.ContainsAny(s, "<>&") {
				t.Errorf("%s: %q is not as the host writes it (clipped, and free of characters JSON escapes)", ex.name, s)
			}
		}
	}
}
