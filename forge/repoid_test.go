package forge_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/jobs"
)

// payloadID reads the number at path of a published payload, apart from
// the parsers, so a parser that reads another field (or none) is caught.
func payloadID(t *testing.T, body []byte, path ...string) int64 {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(body, &v))
	for _, k := range path {
		m, ok := v.(map[string]any)
		require.True(t, ok, "no %s in the payload", k)
		v = m[k]
	}
	n, ok := v.(float64)
	require.True(t, ok, "%v is not a number", path)
	return int64(n)
}

// Each parser records the repository's numeric id from the forges' own
// published payloads, and the job made of the event carries it: the host
// that runs the job refuses a repository the forge answers under another id.
func TestParseReadsTheRepositoryID(t *testing.T) {
	fts := triggers(t, triggersFile)
	for _, name := range []string{"issues", "issue_comment", "pull_request", "pull_request_review"} {
		for i, ex := range fixtures.GitHubAll(t, name) {
			ev, err := forge.ParseGitHub(name, "d-1", ex)
			require.NoError(t, err, "%s[%d]", name, i)
			want := payloadID(t, ex, "repository", "id")
			require.Positive(t, want, "%s[%d]", name, i)
			assert.Equal(t, want, ev.RepoID, "%s[%d]", name, i)
		}
	}

	for _, c := range []struct{ event, file string }{
		{"Issue Hook", "issue.json"}, {"Merge Request Hook", "merge_request.json"},
		{"Note Hook", "note_issue.json"}, {"Note Hook", "note_merge_request.json"},
	} {
		body := fixtures.File(t, "gitlab", c.file)
		ev, err := forge.ParseGitLab(c.event, "d", body)
		require.NoError(t, err, c.file)
		want := payloadID(t, body, "project", "id")
		require.Positive(t, want, c.file)
		assert.Equal(t, want, ev.RepoID, c.file)
		assert.Equal(t, ev.ProjectID, ev.RepoID, c.file)
	}
	// The documented payloads all name project 1 or 5; one naming another
	// id shows the id is read, not assumed.
	body := fixtures.Edit(t, fixtures.File(t, "gitlab", "issue.json"), func(m map[string]any) {
		m["project"].(map[string]any)["id"] = 987654
	})
	ev, err := forge.ParseGitLab("Issue Hook", "d", body)
	require.NoError(t, err)
	assert.Equal(t, int64(987654), ev.RepoID)

	for _, name := range []string{"issues_label_updated", "issue_comment_created", "pull_request_opened", "issues_closed"} {
		event, body := forgejoDelivery(t, name)
		ev, err := forge.ParseForgejo(event, "d", body)
		require.NoError(t, err, name)
		want := payloadID(t, body, "repository", "id")
		require.Positive(t, want, name)
		assert.Equal(t, want, ev.RepoID, name)
	}
	event, body := forgejoDelivery(t, "issues_label_updated")
	body = fixtures.Edit(t, body, func(m map[string]any) { m["repository"].(map[string]any)["id"] = 4242 })
	ev, err = forge.ParseForgejo(event, "d", body)
	require.NoError(t, err)
	assert.Equal(t, int64(4242), ev.RepoID)

	// The job carries it, and a valid job it stays.
	d := forge.Delivery(fts[1], forge.Event{Forge: jobs.ForgeGitHub, DeliveryID: "abc", Repo: "Codertocat/Hello-World",
		RepoID: 186853002, Number: 3}, 1)
	assert.Equal(t, int64(186853002), d.Job.RepoID)
	data, err := json.Marshal(d.Job)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"repoId":186853002`)
	_, err = jobs.ParseJob(data)
	require.NoError(t, err)
}

// A payload naming a negative or oversized repository id makes no job.
func TestParseRefusesABadRepositoryID(t *testing.T) {
	for _, id := range []int64{-1, jobs.MaxRepoID + 1} {
		event, body := forgejoDelivery(t, "issues_label_updated")
		body = fixtures.Edit(t, body, func(m map[string]any) { m["repository"].(map[string]any)["id"] = id })
		_, err := forge.ParseForgejo(event, "d", body)
		assert.ErrorIs(t, err, forge.ErrMalformed, "id %d", id)
	}
}
