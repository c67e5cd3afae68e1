package config

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/forge/token"
)

// Bounds of the publish limits.
const (
	PublishMaxFilesDefault = 200
	PublishMaxFilesLimit   = 100_000
	PublishMaxBytesDefault = 5 << 20
	PublishMaxBytesLimit   = 1 << 30
)

// PublishError is a publish or forge credential variable with a value its
// rule refuses. It names the variable and the rule, never a credential.
type PublishError struct {
	Var  string
	Rule string
}

func (e *PublishError) Error() string { return e.Var + ": " + e.Rule }

// Publish is how the host publishes forge jobs' changes.
type Publish struct {
	// MaxFiles is the most files one job may add, change or remove
	// (PI_PUBLISH_MAX_FILES).
	MaxFiles int
	// MaxBytes is the most bytes of added or changed contents
	// (PI_PUBLISH_MAX_BYTES).
	MaxBytes int64
}

// LoadPublish reads PI_PUBLISH_MAX_FILES and PI_PUBLISH_MAX_BYTES.
func LoadPublish(getenv func(string) string) (Publish, error) {
	p := Publish{MaxFiles: PublishMaxFilesDefault, MaxBytes: PublishMaxBytesDefault}
	if v := strings.TrimSpace(getenv("PI_PUBLISH_MAX_FILES")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > PublishMaxFilesLimit {
			return Publish{}, &PublishError{Var: "PI_PUBLISH_MAX_FILES", Rule: fmt.Sprintf("must be an integer 1..%d", PublishMaxFilesLimit)}
		}
		p.MaxFiles = n
	}
	if v := strings.TrimSpace(getenv("PI_PUBLISH_MAX_BYTES")); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > PublishMaxBytesLimit {
			return Publish{}, &PublishError{Var: "PI_PUBLISH_MAX_BYTES", Rule: fmt.Sprintf("must be an integer 1..%d", int64(PublishMaxBytesLimit))}
		}
		p.MaxBytes = n
	}
	return p, nil
}

// GitHub credential sources (GITHUB_AUTH_SOURCE).
const (
	GitHubAuthApp = "app" // a GitHub App: per-job installation tokens
	GitHubAuthPAT = "pat" // a personal access token (the fallback)
)

// PublishGitHub is the host's GitHub credential.
type PublishGitHub struct {
	// Source is GitHubAuthApp or GitHubAuthPAT.
	Source         string
	AppID          int64
	InstallationID int64
	// PrivateKeyPath is the App's PEM key file.
	PrivateKeyPath string
	PAT            token.Token
	// APIURL is the REST root (GitHub Enterprise Server, a test forge); "":
	// api.github.com.
	APIURL string
}

// PublishForge is a forge reached with one standing token.
type PublishForge struct {
	URL   string
	Token token.Token
}

// PublishForges are the forges this host can publish to; a nil field: not
// configured.
type PublishForges struct {
	GitHub  *PublishGitHub
	GitLab  *PublishForge
	Forgejo *PublishForge
}

// LoadPublishForges reads the forge credentials: GITHUB_AUTH_SOURCE,
// GITHUB_PAT, GITHUB_APP_ID, GITHUB_APP_INSTALLATION_ID,
// GITHUB_APP_PRIVATE_KEY_PATH, GITHUB_API_URL, GITLAB_URL, GITLAB_TOKEN,
// FORGEJO_URL and FORGEJO_TOKEN. The App key file is checked to exist, not
// read.
func LoadPublishForges(getenv func(string) string) (PublishForges, error) {
	var out PublishForges
	source := strings.TrimSpace(getenv("GITHUB_AUTH_SOURCE"))
	appID := strings.TrimSpace(getenv("GITHUB_APP_ID"))
	pat := strings.TrimSpace(getenv("GITHUB_PAT"))
	if source == "" {
		switch {
		case appID != "":
			source = GitHubAuthApp
		case pat != "":
			source = GitHubAuthPAT
		}
	}
	apiURL := strings.TrimSpace(getenv("GITHUB_API_URL"))
	if apiURL != "" {
		if err := checkURL(apiURL); err != "" {
			return out, &PublishError{Var: "GITHUB_API_URL", Rule: err}
		}
	}
	switch source {
	case "":
	case GitHubAuthApp:
		gh := &PublishGitHub{Source: source, APIURL: apiURL, PrivateKeyPath: strings.TrimSpace(getenv("GITHUB_APP_PRIVATE_KEY_PATH"))}
		var err error
		if gh.AppID, err = strconv.ParseInt(appID, 10, 64); err != nil || gh.AppID < 1 {
			return out, &PublishError{Var: "GITHUB_APP_ID", Rule: "must be the App's numeric id"}
		}
		inst := strings.TrimSpace(getenv("GITHUB_APP_INSTALLATION_ID"))
		if gh.InstallationID, err = strconv.ParseInt(inst, 10, 64); err != nil || gh.InstallationID < 1 {
			return out, &PublishError{Var: "GITHUB_APP_INSTALLATION_ID", Rule: "must be the installation's numeric id"}
		}
		if gh.PrivateKeyPath == "" || !strings.HasPrefix(gh.PrivateKeyPath, "/") {
			return out, &PublishError{Var: "GITHUB_APP_PRIVATE_KEY_PATH", Rule: "must be an absolute path to the App's PEM key"}
		}
		if st, err := os.Stat(gh.PrivateKeyPath); err != nil || !st.Mode().IsRegular() {
			return out, &PublishError{Var: "GITHUB_APP_PRIVATE_KEY_PATH", Rule: "must name a readable file"}
		}
		out.GitHub = gh
	case GitHubAuthPAT:
		if pat == "" {
			return out, &PublishError{Var: "GITHUB_PAT", Rule: "required when GITHUB_AUTH_SOURCE is pat"}
		}
		out.GitHub = &PublishGitHub{Source: source, APIURL: apiURL, PAT: token.New(pat, time.Time{})}
	default:
		return out, &PublishError{Var: "GITHUB_AUTH_SOURCE", Rule: "must be app or pat"}
	}
	var err error
	if out.GitLab, err = standing(getenv, "GITLAB_URL", "GITLAB_TOKEN"); err != nil {
		return out, err
	}
	if out.Forgejo, err = standing(getenv, "FORGEJO_URL", "FORGEJO_TOKEN"); err != nil {
		return out, err
	}
	return out, nil
}

func standing(getenv func(string) string, urlVar, tokenVar string) (*PublishForge, error) {
	u, tok := strings.TrimSpace(getenv(urlVar)), strings.TrimSpace(getenv(tokenVar))
	switch {
	case u == "" && tok == "":
		return nil, nil
	case u == "":
		return nil, &PublishError{Var: urlVar, Rule: "required with " + tokenVar}
	case tok == "":
		return nil, &PublishError{Var: tokenVar, Rule: "required with " + urlVar}
	}
	if rule := checkURL(u); rule != "" {
		return nil, &PublishError{Var: urlVar, Rule: rule}
	}
	return &PublishForge{URL: strings.TrimSuffix(u, "/"), Token: token.New(tok, time.Time{})}, nil
}

func checkURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "must be an http(s) URL without credentials, query or fragment"
	}
	return ""
}
