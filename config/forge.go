package config

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/internal/check"
)

// Defaults of the forge variables.
const (
	DefaultReceiverPort        = 3000
	DefaultReceiverBind        = "0.0.0.0"
	DefaultGitHubAPIURL        = "https://api.github.com"
	DefaultGitLabURL           = "https://gitlab.com"
	DefaultPollIntervalSeconds = 60
	MinPollIntervalSeconds     = 30
)

// Forge is the forge intake's configuration: the receiver, the GitHub
// poller, and each forge's credentials. Secrets are held only here and in
// the receiver; String never prints one.
type Forge struct {
	// WebhookSecret is WEBHOOK_SECRET: GitHub's webhook secret. Empty: the
	// GitHub route is not served.
	WebhookSecret string
	// ReceiverBind and ReceiverPort are RECEIVER_BIND and RECEIVER_PORT.
	ReceiverBind string
	ReceiverPort int

	// GitHubAuthSource is GITHUB_AUTH_SOURCE: "pat" or "app" ("" when no
	// GitHub credential is configured).
	GitHubAuthSource string
	GitHubPAT        string // GITHUB_PAT
	// GitHubAppID, GitHubAppInstallationID and GitHubAppPrivateKeyPath are
	// the GitHub App's (GITHUB_APP_*), with GITHUB_AUTH_SOURCE=app.
	GitHubAppID             int64
	GitHubAppInstallationID int64
	GitHubAppPrivateKeyPath string
	// GitHubAPIURL is GITHUB_API_URL (GitHub Enterprise Server: .../api/v3).
	GitHubAPIURL string

	// PollRepos is POLL_REPOS (owner/name, deduplicated); PollInterval is
	// POLL_INTERVAL_SECONDS.
	PollRepos    []string
	PollInterval time.Duration

	// GitLab: GITLAB_URL, GITLAB_TOKEN, GITLAB_WEBHOOK_MODE (token or
	// signature, required with a secret) and GITLAB_WEBHOOK_SECRET.
	GitLabURL           string
	GitLabToken         string
	GitLabWebhookMode   string
	GitLabWebhookSecret string

	// Forgejo (or Gitea): FORGEJO_URL, FORGEJO_TOKEN, FORGEJO_WEBHOOK_SECRET.
	ForgejoURL           string
	ForgejoToken         string
	ForgejoWebhookSecret string
}

// ForgeError is one variable of the forge configuration that breaks a rule.
// It never repeats a secret's value.
type ForgeError struct {
	Var  string
	Rule string
}

func (e *ForgeError) Error() string { return e.Var + ": " + e.Rule }

// ReceiverAddr is RECEIVER_BIND:RECEIVER_PORT.
func (f Forge) ReceiverAddr() string {
	return net.JoinHostPort(f.ReceiverBind, strconv.Itoa(f.ReceiverPort))
}

// LoadForge reads the forge variables through getenv. The first broken rule
// comes back as a *ForgeError naming the variable.
func LoadForge(getenv func(string) string) (Forge, error) {
	f := Forge{
		WebhookSecret:        getenv("WEBHOOK_SECRET"),
		ReceiverBind:         strings.TrimSpace(getenv("RECEIVER_BIND")),
		GitHubPAT:            getenv("GITHUB_PAT"),
		GitHubAPIURL:         strings.TrimSpace(getenv("GITHUB_API_URL")),
		GitLabURL:            strings.TrimSpace(getenv("GITLAB_URL")),
		GitLabToken:          getenv("GITLAB_TOKEN"),
		GitLabWebhookMode:    strings.TrimSpace(getenv("GITLAB_WEBHOOK_MODE")),
		GitLabWebhookSecret:  getenv("GITLAB_WEBHOOK_SECRET"),
		ForgejoURL:           strings.TrimSpace(getenv("FORGEJO_URL")),
		ForgejoToken:         getenv("FORGEJO_TOKEN"),
		ForgejoWebhookSecret: getenv("FORGEJO_WEBHOOK_SECRET"),
	}
	fail := func(v, format string, args ...any) (Forge, error) {
		return Forge{}, &ForgeError{Var: v, Rule: fmt.Sprintf(format, args...)}
	}
	if f.ReceiverBind == "" {
		f.ReceiverBind = DefaultReceiverBind
	} else if net.ParseIP(f.ReceiverBind) == nil && f.ReceiverBind != "localhost" {
		return fail("RECEIVER_BIND", "must be an IP address such as 0.0.0.0 or 127.0.0.1")
	}
	f.ReceiverPort = DefaultReceiverPort
	if v := strings.TrimSpace(getenv("RECEIVER_PORT")); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 || p > 65535 {
			return fail("RECEIVER_PORT", "must be a port number from 1 to 65535")
		}
		f.ReceiverPort = p
	}
	var err error
	if f.GitHubAPIURL, err = baseURL("GITHUB_API_URL", f.GitHubAPIURL, DefaultGitHubAPIURL); err != nil {
		return Forge{}, err
	}

	switch src := strings.TrimSpace(getenv("GITHUB_AUTH_SOURCE")); src {
	case "":
		if f.GitHubPAT != "" {
			f.GitHubAuthSource = "pat"
		}
	case "pat":
		if f.GitHubPAT == "" {
			return fail("GITHUB_PAT", "required with GITHUB_AUTH_SOURCE=pat")
		}
		f.GitHubAuthSource = src
	case "app":
		f.GitHubAuthSource = src
		if f.GitHubAppID, err = positive("GITHUB_APP_ID", getenv("GITHUB_APP_ID")); err != nil {
			return Forge{}, err
		}
		if f.GitHubAppInstallationID, err = positive("GITHUB_APP_INSTALLATION_ID", getenv("GITHUB_APP_INSTALLATION_ID")); err != nil {
			return Forge{}, err
		}
		f.GitHubAppPrivateKeyPath = strings.TrimSpace(getenv("GITHUB_APP_PRIVATE_KEY_PATH"))
		if f.GitHubAppPrivateKeyPath == "" {
			return fail("GITHUB_APP_PRIVATE_KEY_PATH", "required with GITHUB_AUTH_SOURCE=app: the App's private key file (PEM)")
		}
		if rule := check.AbsClean(f.GitHubAppPrivateKeyPath); rule != "" {
			return fail("GITHUB_APP_PRIVATE_KEY_PATH", "%s", rule)
		}
		if f.GitHubPAT != "" {
			return fail("GITHUB_PAT", "set with GITHUB_AUTH_SOURCE=app: choose one credential")
		}
	case "gh":
		return fail("GITHUB_AUTH_SOURCE", `"gh" (the operator's whole gh login) is not supported; use app or pat`)
	default:
		return fail("GITHUB_AUTH_SOURCE", "must be app or pat")
	}

	seen := map[string]bool{}
	for _, r := range strings.Split(getenv("POLL_REPOS"), ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		if strings.Count(r, "/") != 1 || !check.Repo(r) {
			return fail("POLL_REPOS", "%s is not owner/name", check.Quote(r))
		}
		if !seen[r] {
			seen[r] = true
			f.PollRepos = append(f.PollRepos, r)
		}
	}
	slices.Sort(f.PollRepos)
	secs := DefaultPollIntervalSeconds
	if v := strings.TrimSpace(getenv("POLL_INTERVAL_SECONDS")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < MinPollIntervalSeconds || n > 86400 {
			return fail("POLL_INTERVAL_SECONDS", "must be a whole number of seconds from %d to 86400", MinPollIntervalSeconds)
		}
		secs = n
	}
	f.PollInterval = time.Duration(secs) * time.Second

	if f.GitLabURL, err = baseURL("GITLAB_URL", f.GitLabURL, DefaultGitLabURL); err != nil {
		return Forge{}, err
	}
	switch f.GitLabWebhookMode {
	case "", "token", "signature":
	default:
		return fail("GITLAB_WEBHOOK_MODE", "must be token or signature")
	}
	if f.GitLabWebhookSecret != "" && f.GitLabWebhookMode == "" {
		return fail("GITLAB_WEBHOOK_MODE", "required with GITLAB_WEBHOOK_SECRET: token (X-Gitlab-Token) or signature (signing token)")
	}
	if f.GitLabWebhookMode != "" && f.GitLabWebhookSecret == "" {
		return fail("GITLAB_WEBHOOK_SECRET", "required with GITLAB_WEBHOOK_MODE")
	}
	if f.GitLabWebhookSecret != "" && f.GitLabToken == "" {
		return fail("GITLAB_TOKEN", "required with GITLAB_WEBHOOK_SECRET: permissions are checked with it")
	}
	if f.ForgejoURL != "" {
		if f.ForgejoURL, err = baseURL("FORGEJO_URL", f.ForgejoURL, ""); err != nil {
			return Forge{}, err
		}
	}
	if f.ForgejoWebhookSecret != "" && (f.ForgejoURL == "" || f.ForgejoToken == "") {
		return fail("FORGEJO_URL", "FORGEJO_URL and FORGEJO_TOKEN are required with FORGEJO_WEBHOOK_SECRET")
	}
	if f.WebhookSecret != "" && f.GitHubAuthSource == "" {
		return fail("GITHUB_AUTH_SOURCE", "a credential (pat or app) is required with WEBHOOK_SECRET: permissions are checked with it")
	}
	if len(f.PollRepos) > 0 && f.GitHubAuthSource == "" {
		return fail("GITHUB_AUTH_SOURCE", "a credential (pat or app) is required with POLL_REPOS")
	}
	return f, nil
}

func positive(name, v string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n <= 0 {
		return 0, &ForgeError{Var: name, Rule: "must be a positive integer"}
	}
	return n, nil
}

// baseURL checks an https (or, for tests and local forges, http) URL without
// query, fragment or credentials, and strips a trailing slash.
func baseURL(name, v, def string) (string, error) {
	if v == "" {
		return def, nil
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", &ForgeError{Var: name, Rule: "must be an http(s) URL without credentials, query or fragment"}
	}
	return strings.TrimSuffix(v, "/"), nil
}

// String describes the configuration without any secret.
func (f Forge) String() string {
	set := func(s string) string {
		if s == "" {
			return "unset"
		}
		return "set"
	}
	return fmt.Sprintf("receiver=%s github=%s(%s) secret=%s poll=%d/%s gitlab=%s(%s) forgejo=%s",
		f.ReceiverAddr(), f.GitHubAuthSource, f.GitHubAPIURL, set(f.WebhookSecret), len(f.PollRepos), f.PollInterval,
		f.GitLabWebhookMode, f.GitLabURL, set(f.ForgejoWebhookSecret))
}
