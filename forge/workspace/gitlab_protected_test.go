package workspace

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge/token"
)

// GitLab's rule (Gitlab::RefMatcher): a protected branch name without * names
// one branch; with *, the whole branch name must match and each * stands for
// any run of characters, / included. No other character is special.
func TestGitLabProtects(t *testing.T) {
	for _, tc := range []struct {
		rule, branch string
		want         bool
	}{
		{"main", "main", true},
		{"main", "main2", false},
		{"main", "xmain", false},
		{"*", "pi/issue-3", true},
		{"*", "main", true},
		{"pi/*", "pi/issue-3", true},
		{"pi/*", "pi/issue/3", true},
		{"pi/*", "pi/", true},
		{"pi/*", "pi", false},
		{"pi/*", "xpi/issue-3", false},
		{"*-stable", "11-0-stable", true},
		{"*-stable", "release/11-0-stable", true},
		{"*-stable", "11-0-stable-x", false},
		{"production/*/*", "production/eu/web", true},
		{"production/*/*", "production/eu/web/1", true},
		{"production/*/*", "production/eu", false},
		{"*issue*", "pi/issue-3", true},
		{"pi/*-3", "pi/issue-3", true},
		{"pi/*-3", "pi/issue-4", false},
		{"a*b*a", "aba", true},
		{"a*b*a", "ab", false},
		{"**", "pi/issue-3", true},
		// Only * is a wildcard: ?, [ ] and \ are themselves.
		{"pi/issue-?", "pi/issue-3", false},
		{"pi/issue-?", "pi/issue-?", true},
		{"pi/[a-z]*", "pi/issue-3", false},
		{"pi/[a-z]*", "pi/[a-z]x", true},
		{`pi\/*`, "pi/issue-3", false},
		{"", "main", false},
		{"", "", false},
	} {
		require.Equal(t, tc.want, gitlabProtects(tc.rule, tc.branch), "%q protects %q", tc.rule, tc.branch)
	}
}

// A protected-branches double answering GitLab's published shape of GET
// /projects/:id/protected_branches, paged 100 at a time.
func protectedBranchesDouble(t *testing.T, names []string) *GitLab {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v4/projects/{id}/protected_branches", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "acme/widgets" || r.Header.Get("Private-Token") != "tok" {
			http.Error(w, `{"message":"404 Project Not Found"}`, http.StatusNotFound)
			return
		}
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		page = max(page, 1)
		type level struct {
			ID                     int    `json:"id"`
			AccessLevel            int    `json:"access_level"`
			AccessLevelDescription string `json:"access_level_description"`
			UserID                 *int   `json:"user_id"`
			GroupID                *int   `json:"group_id"`
		}
		type rule struct {
			ID                        int     `json:"id"`
			Name                      string  `json:"name"`
			PushAccessLevels          []level `json:"push_access_levels"`
			MergeAccessLevels         []level `json:"merge_access_levels"`
			AllowForcePush            bool    `json:"allow_force_push"`
			CodeOwnerApprovalRequired bool    `json:"code_owner_approval_required"`
		}
		out := []rule{}
		for i := (page - 1) * 100; i < len(names) && i < page*100; i++ {
			out = append(out, rule{ID: i + 1, Name: names[i],
				PushAccessLevels:  []level{{ID: 1, AccessLevel: 40, AccessLevelDescription: "Maintainers"}},
				MergeAccessLevels: []level{{ID: 1, AccessLevel: 40, AccessLevelDescription: "Maintainers"}}})
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Total", strconv.Itoa(len(names)))
		_ = json.NewEncoder(w).Encode(out)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &GitLab{URL: srv.URL}
}

// A push to a branch a wildcard rule protects is a push to a protected
// branch, however deep the branch's name: asked through the client, as
// publish asks.
func TestGitLabBranchProtectedByWildcard(t *testing.T) {
	tok := token.New("tok", time.Now().Add(time.Hour))
	ctx := context.Background()
	filler := make([]string, 0, 150)
	for i := range 150 {
		filler = append(filler, "keep-"+strconv.Itoa(i))
	}
	for _, tc := range []struct {
		name   string
		rules  []string
		branch string
		want   bool
	}{
		{"every branch", []string{"main", "*"}, "pi/issue-3", true},
		{"a prefix over a nested name", []string{"main", "pi/*"}, "pi/issue/3", true},
		{"a suffix across folders", []string{"*-stable"}, "release/11-0-stable", true},
		{"two wildcards", []string{"production/*/*"}, "production/eu/web", true},
		{"a wildcard on the second page", append(append([]string{}, filler...), "pi/*"), "pi/issue-3", true},
		{"no rule names it", []string{"main", "release/*", "*-stable"}, "pi/issue-3", false},
		{"a question mark is no wildcard", []string{"pi/issue-?"}, "pi/issue-3", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := protectedBranchesDouble(t, tc.rules).BranchProtected(ctx, tok, "acme/widgets", tc.branch)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
