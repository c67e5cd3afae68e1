package forge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"code.gitea.io/sdk/gitea"
	gitlab "gitlab.com/gitlab-org/api/client-go/v2"
)

// ErrSelfUnknown marks a self identity the forge would not give.
var ErrSelfUnknown = errors.New("own user id unknown")

// GitHubSelfID asks GitHub (GET /user) for the id of the user tok belongs
// to: the events that user causes never start a job (IntakeConfig.SelfIDs).
// A GitHub App's installation token has no /user: GitHubAppSelfID finds its bot.
func GitHubSelfID(ctx context.Context, base, tok string, hc *http.Client) (int64, error) {
	c, err := GitHubClient(base, tok, hc)
	if err != nil {
		return 0, err
	}
	u, _, err := c.Users.Get(ctx, "")
	if err != nil {
		return 0, fmt.Errorf("%w: github: %v", ErrSelfUnknown, err)
	}
	return u.GetID(), nil
}

// GitHubAppSelfID finds the id of a GitHub App's bot user, the author of
// what the App's installation tokens write: GET /app with the App's JWT
// names the App's slug, and GET /users/<slug>[bot] the bot's id.
func GitHubAppSelfID(ctx context.Context, base, jwt string, hc *http.Client) (int64, error) {
	c, err := GitHubClient(base, jwt, hc)
	if err != nil {
		return 0, err
	}
	app, _, err := c.Apps.Get(ctx, "")
	if err != nil {
		return 0, fmt.Errorf("%w: github app: %v", ErrSelfUnknown, err)
	}
	if app.GetSlug() == "" {
		return 0, fmt.Errorf("%w: github app: no slug", ErrSelfUnknown)
	}
	anon, err := GitHubClient(base, "", hc)
	if err != nil {
		return 0, err
	}
	u, _, err := anon.Users.Get(ctx, app.GetSlug()+"[bot]")
	if err != nil {
		return 0, fmt.Errorf("%w: github app bot %s[bot]: %v", ErrSelfUnknown, app.GetSlug(), err)
	}
	return u.GetID(), nil
}

// GitLabSelfID asks GitLab (GET /user) for the token's own user (a project or
// group token is its own bot user).
func GitLabSelfID(ctx context.Context, base, tok string, hc *http.Client) (int64, error) {
	c, err := gitlab.NewClient(tok, gitlab.WithBaseURL(strings.TrimSuffix(base, "/")+"/api/v4"),
		gitlab.WithHTTPClient(httpClient(hc)), gitlab.WithoutRetries())
	if err != nil {
		return 0, err
	}
	u, _, err := c.Users.CurrentUser(gitlab.WithContext(ctx))
	if err != nil {
		return 0, fmt.Errorf("%w: gitlab: %v", ErrSelfUnknown, err)
	}
	return u.ID, nil
}

// ForgejoSelfID asks Forgejo or Gitea (GET /api/v1/user) for the token's user.
func ForgejoSelfID(ctx context.Context, base, tok string, hc *http.Client) (int64, error) {
	c, err := gitea.NewClient(base, gitea.SetToken(tok), gitea.SetHTTPClient(httpClient(hc)),
		gitea.SetContext(ctx), gitea.SetGiteaVersion(""))
	if err != nil {
		return 0, err
	}
	u, _, err := c.GetMyUserInfo()
	if err != nil {
		return 0, fmt.Errorf("%w: forgejo: %v", ErrSelfUnknown, err)
	}
	return u.ID, nil
}
