package poller

import (
	"encoding/json"
	"testing"

	"github.com/google/go-github/v84/github"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The poller's events carry the repository's id where GitHub's answer names
// it: a listed pull request names its base repository; an issue event names
// it when the answer has it. A comment or a review names none (0: the job
// runs by name).
func TestPollerEventsCarryTheRepositoryID(t *testing.T) {
	var pr github.PullRequest
	require.NoError(t, json.Unmarshal([]byte(`{"number":5,"head":{"sha":"abc1234"},"user":{"id":11,"login":"author"},
	 "base":{"ref":"main","repo":{"id":1296269,"full_name":"acme/api"}}}`), &pr))
	ev, ok := pullEvent("acme/api", &pr, "synchronize")
	require.True(t, ok)
	assert.Equal(t, int64(1296269), ev.RepoID)

	var e github.IssueEvent
	require.NoError(t, json.Unmarshal([]byte(`{"id":9,"event":"labeled","actor":{"id":7,"login":"maint"},"label":{"name":"bug"},
	 "issue":{"number":3,"labels":[{"name":"bug"}],"repository":{"id":1296269}}}`), &e))
	ev, ok = eventOf("acme/api", &e)
	require.True(t, ok)
	assert.Equal(t, int64(1296269), ev.RepoID)

	e = github.IssueEvent{}
	require.NoError(t, json.Unmarshal([]byte(`{"id":10,"event":"labeled","actor":{"id":7,"login":"maint"},"label":{"name":"bug"},
	 "issue":{"number":3,"labels":[{"name":"bug"}]}}`), &e))
	ev, ok = eventOf("acme/api", &e)
	require.True(t, ok)
	assert.Zero(t, ev.RepoID, "no id in the answer: none is made up")
}
