package config

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
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

	// DefaultReceiverStoreTimeout is RECEIVER_STORE_TIMEOUT's default: how
	// long the receiver waits for Valkey to store a delivery before it
	// writes it to the spool. Min and Max bound it, so a delivery is
	// answered within 2 seconds.
	DefaultReceiverStoreTimeout = time.Second
	MinReceiverStoreTimeout     = 100 * time.Millisecond
	MaxReceiverStoreTimeout     = 1500 * time.Millisecond
	// DefaultReceiverSpoolMax is RECEIVER_SPOOL_MAX's default (256 MiB);
	// Min and Max bound it.
	DefaultReceiverSpoolMax = 256 << 20
	MinReceiverSpoolMax     = 4 << 20
	MaxReceiverSpoolMax     = 1 << 40
	// DefaultReceiverInboxMax is RECEIVER_INBOX_MAX's default; Min and Max
	// bound it.
	DefaultReceiverInboxMax = 10000
	MinReceiverInboxMax     = 100
	MaxReceiverInboxMax     = 1000000
)

// GitHub credential sources (GITHUB_AUTH_SOURCE).
const (
	GitHubAuthApp = "app" // a GitHub App: installation tokens, minted per use
	GitHubAuthPAT = "pat" // a personal access token (the fallback)
)

// ForgeCredentials are the host's forge credentials, read once by
// LoadForgeCredentials for every part that talks to a forge: the receiver's
// permission lookups and poller, and the worker's clone and publish. A nil
// field: that forge is not configured. Tokens are Secrets, which never
// print.
type ForgeCredentials struct {
	// GitHubAPIURL is GITHUB_API_URL without its trailing slash (default
	// https://api.github.com; a GitHub Enterprise Server's is .../api/v3).
	GitHubAPIURL string
	GitHub       *GitHubCredential
	// GitLabURL is GITLAB_URL (default https://gitlab.com).
	GitLabURL string
	// GitLab is GITLAB_TOKEN at GitLabURL.
	GitLab *ForgeAccount
	// Forgejo is FORGEJO_TOKEN at FORGEJO_URL (Forgejo or Gitea).
	Forgejo *ForgeAccount
}

// GitHubCredential is the host's GitHub credential.
type GitHubCredential struct {
	// Source is GitHubAuthApp or GitHubAuthPAT.
	Source string
	// PAT is GITHUB_PAT (Source pat).
	PAT Secret
	// AppID, InstallationID and PrivateKeyPath are GITHUB_APP_ID,
	// GITHUB_APP_INSTALLATION_ID and GITHUB_APP_PRIVATE_KEY_PATH (Source app).
	AppID          int64
	InstallationID int64
	PrivateKeyPath string
	// APIURL is ForgeCredentials.GitHubAPIURL.
	APIURL string
}

// PrivateKey reads and parses the App's private key file. A failure is a
// *ConfigError naming GITHUB_APP_PRIVATE_KEY_PATH; the key never appears in it.
func (g *GitHubCredential) PrivateKey() (*rsa.PrivateKey, error) {
	pemBytes, err := os.ReadFile(g.PrivateKeyPath)
	if err != nil {
		return nil, forgeError("GITHUB_APP_PRIVATE_KEY_PATH", g.PrivateKeyPath, "must name a readable file")
	}
	key, err := parseRSAKey(pemBytes)
	if err != nil {
		return nil, forgeError("GITHUB_APP_PRIVATE_KEY_PATH", g.PrivateKeyPath, "must hold an RSA private key in PEM (PKCS#1 or PKCS#8)")
	}
	return key, nil
}

// ForgeAccount is a forge reached with one standing token.
type ForgeAccount struct {
	URL   string
	Token Secret
}

// Secret is a credential read from the environment. It never prints: its
// String, Format, GoString, JSON, text and slog forms are "[redacted]", so it
// cannot leak into a log line or an error by accident; Reveal is the one way
// to its value.
type Secret struct{ value string }

// NewSecret wraps value.
func NewSecret(value string) Secret { return Secret{value: value} }

// Reveal returns the credential, for the code that hands it to the forge.
func (s Secret) Reveal() string { return s.value }

// IsZero reports whether the secret is empty.
func (s Secret) IsZero() bool { return s.value == "" }

const redacted = "[redacted]"

// String redacts.
func (s Secret) String() string { return redacted }

// GoString redacts (%#v).
func (s Secret) GoString() string { return redacted }

// Format redacts every verb.
func (s Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue redacts in log/slog.
func (s Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON redacts.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText redacts.
func (s Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// parseRSAKey reads a PEM private key (PKCS#1 or PKCS#8 RSA).
func parseRSAKey(pemBytes []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("not an RSA key")
	}
	return rk, nil
}

// forgeSecrets are the forge variables whose value an error never repeats.
var forgeSecrets = map[string]bool{
	"WEBHOOK_SECRET": true, "GITHUB_PAT": true, "GITLAB_TOKEN": true, "GITLAB_WEBHOOK_SECRET": true,
	"FORGEJO_TOKEN": true, "FORGEJO_WEBHOOK_SECRET": true,
}

// forgeError is the *ConfigError of a forge variable; a secret's value is
// redacted, a URL's credentials too.
func forgeError(name, value, rule string) *ConfigError {
	switch {
	case forgeSecrets[name] && value != "":
		value = "[redacted]"
	case strings.HasSuffix(name, "_URL"):
		value = RedactURL(value)
	}
	return &ConfigError{Var: name, Value: value, Rule: rule}
}

// LoadForgeCredentials reads GITHUB_AUTH_SOURCE, GITHUB_PAT, GITHUB_APP_ID,
// GITHUB_APP_INSTALLATION_ID, GITHUB_APP_PRIVATE_KEY_PATH, GITHUB_API_URL,
// GITLAB_URL, GITLAB_TOKEN, FORGEJO_URL and FORGEJO_TOKEN through getenv. It
// is the one parser of these variables. GITHUB_AUTH_SOURCE unset means app
// when GITHUB_APP_ID is set, else pat when GITHUB_PAT is set, else no GitHub
// credential. The App's key file is checked to be a file, not read
// (GitHubCredential.PrivateKey reads it). The first broken rule comes back
// as a *ConfigError naming the variable, never repeating a secret.
func LoadForgeCredentials(getenv func(string) string) (ForgeCredentials, error) {
	var c ForgeCredentials
	var err error
	if c.GitHubAPIURL, err = baseURL("GITHUB_API_URL", strings.TrimSpace(getenv("GITHUB_API_URL")), DefaultGitHubAPIURL); err != nil {
		return ForgeCredentials{}, err
	}
	if c.GitHub, err = loadGitHub(getenv, c.GitHubAPIURL); err != nil {
		return ForgeCredentials{}, err
	}
	glURL := strings.TrimSpace(getenv("GITLAB_URL"))
	if c.GitLabURL, err = baseURL("GITLAB_URL", glURL, DefaultGitLabURL); err != nil {
		return ForgeCredentials{}, err
	}
	if tok := strings.TrimSpace(getenv("GITLAB_TOKEN")); tok != "" {
		c.GitLab = &ForgeAccount{URL: c.GitLabURL, Token: NewSecret(tok)}
	} else if glURL != "" {
		return ForgeCredentials{}, forgeError("GITLAB_TOKEN", "", "required with GITLAB_URL")
	}
	fjURL, fjTok := strings.TrimSpace(getenv("FORGEJO_URL")), strings.TrimSpace(getenv("FORGEJO_TOKEN"))
	switch {
	case fjURL == "" && fjTok == "":
	case fjURL == "":
		return ForgeCredentials{}, forgeError("FORGEJO_URL", "", "required with FORGEJO_TOKEN")
	case fjTok == "":
		return ForgeCredentials{}, forgeError("FORGEJO_TOKEN", "", "required with FORGEJO_URL")
	default:
		u, err := baseURL("FORGEJO_URL", fjURL, "")
		if err != nil {
			return ForgeCredentials{}, err
		}
		c.Forgejo = &ForgeAccount{URL: u, Token: NewSecret(fjTok)}
	}
	return c, nil
}

func loadGitHub(getenv func(string) string, apiURL string) (*GitHubCredential, error) {
	pat := strings.TrimSpace(getenv("GITHUB_PAT"))
	appID := strings.TrimSpace(getenv("GITHUB_APP_ID"))
	src := strings.TrimSpace(getenv("GITHUB_AUTH_SOURCE"))
	if src == "" {
		switch {
		case appID != "":
			src = GitHubAuthApp
		case pat != "":
			src = GitHubAuthPAT
		}
	}
	switch src {
	case "":
		return nil, nil
	case GitHubAuthPAT:
		if pat == "" {
			return nil, forgeError("GITHUB_PAT", "", "required with GITHUB_AUTH_SOURCE=pat")
		}
		return &GitHubCredential{Source: src, PAT: NewSecret(pat), APIURL: apiURL}, nil
	case GitHubAuthApp:
		g := &GitHubCredential{Source: src, APIURL: apiURL}
		var err error
		if g.AppID, err = positive("GITHUB_APP_ID", appID); err != nil {
			return nil, err
		}
		if g.InstallationID, err = positive("GITHUB_APP_INSTALLATION_ID", getenv("GITHUB_APP_INSTALLATION_ID")); err != nil {
			return nil, err
		}
		g.PrivateKeyPath = strings.TrimSpace(getenv("GITHUB_APP_PRIVATE_KEY_PATH"))
		if g.PrivateKeyPath == "" {
			return nil, forgeError("GITHUB_APP_PRIVATE_KEY_PATH", "", "required with GITHUB_AUTH_SOURCE=app: the App's private key file (PEM)")
		}
		if rule := check.AbsClean(g.PrivateKeyPath); rule != "" {
			return nil, forgeError("GITHUB_APP_PRIVATE_KEY_PATH", g.PrivateKeyPath, rule)
		}
		if st, err := os.Stat(g.PrivateKeyPath); err != nil || !st.Mode().IsRegular() {
			return nil, forgeError("GITHUB_APP_PRIVATE_KEY_PATH", g.PrivateKeyPath, "must name a readable file")
		}
		if pat != "" {
			return nil, forgeError("GITHUB_PAT", pat, "set with GITHUB_AUTH_SOURCE=app: choose one credential")
		}
		return g, nil
	case "gh":
		return nil, forgeError("GITHUB_AUTH_SOURCE", src, `"gh" (the operator's whole gh login) is not supported; use app or pat`)
	default:
		return nil, forgeError("GITHUB_AUTH_SOURCE", src, "must be app or pat")
	}
}

// Forge is the forge intake's configuration: the receiver, the GitHub
// poller, and the host's forge credentials. Secrets are held only here and
// in the receiver; String never prints one.
type Forge struct {
	// Credentials are the forge credentials (LoadForgeCredentials).
	Credentials ForgeCredentials

	// WebhookSecret is WEBHOOK_SECRET: GitHub's webhook secret. Empty: the
	// GitHub route is not served.
	WebhookSecret string
	// ReceiverBind and ReceiverPort are RECEIVER_BIND and RECEIVER_PORT.
	ReceiverBind string
	ReceiverPort int

	// PollRepos is POLL_REPOS (owner/name, deduplicated); PollInterval is
	// POLL_INTERVAL_SECONDS.
	PollRepos    []string
	PollInterval time.Duration

	// GitLabWebhookMode (token or signature, required with a secret) and
	// GitLabWebhookSecret are GITLAB_WEBHOOK_MODE and GITLAB_WEBHOOK_SECRET.
	GitLabWebhookMode   string
	GitLabWebhookSecret string

	// ForgejoWebhookSecret is FORGEJO_WEBHOOK_SECRET.
	ForgejoWebhookSecret string

	// StoreTimeout is RECEIVER_STORE_TIMEOUT: how long a delivery waits for
	// Valkey before it is written to the spool. 0: the default.
	StoreTimeout time.Duration
	// SpoolDir is RECEIVER_SPOOL_DIR: the folder of deliveries waiting for
	// Valkey. "": DefaultSpoolDir(os.Getenv).
	SpoolDir string
	// SpoolVolatile: SpoolDir is the default under the temporary folder (no
	// home known), which a reboot, or a unit's PrivateTmp at each restart,
	// may empty.
	SpoolVolatile bool
	// SpoolMax is RECEIVER_SPOOL_MAX: the spool's bound in bytes. 0: the
	// default.
	SpoolMax int64
	// InboxMax is RECEIVER_INBOX_MAX: how many deliveries each forge's inbox
	// in Valkey holds at most. 0: the default.
	InboxMax int
	// NoStatusComment is RECEIVER_STATUS_COMMENT=off: the receiver writes no
	// queued status comment and holds only reading tokens; the worker writes
	// the comment when it first takes the job.
	NoStatusComment bool
}

// DefaultSpoolDir is RECEIVER_SPOOL_DIR's default, beside the worker's run
// records: $XDG_STATE_HOME/pidispatch/receiver-spool, else
// $HOME/.local/state/pidispatch/receiver-spool, else (no home known)
// $TMPDIR/pi-dispatch/receiver-spool, which a reboot may empty.
func DefaultSpoolDir(getenv func(string) string) string {
	if d := absEnvDir(getenv("XDG_STATE_HOME")); d != "" {
		return filepath.Join(d, "pidispatch", "receiver-spool")
	}
	if d := absEnvDir(getenv("HOME")); d != "" {
		return filepath.Join(d, ".local", "state", "pidispatch", "receiver-spool")
	}
	tmpdir := absEnvDir(getenv("TMPDIR"))
	if tmpdir == "" {
		tmpdir = "/tmp"
	}
	return filepath.Join(tmpdir, "pi-dispatch", "receiver-spool")
}

// ReceiverAddr is RECEIVER_BIND:RECEIVER_PORT.
func (f Forge) ReceiverAddr() string {
	return net.JoinHostPort(f.ReceiverBind, strconv.Itoa(f.ReceiverPort))
}

// LoadForge reads the receiver's variables and the forge credentials
// (LoadForgeCredentials) through getenv. The first broken rule comes back as
// a *ConfigError naming the variable.
func LoadForge(getenv func(string) string) (Forge, error) {
	creds, err := LoadForgeCredentials(getenv)
	if err != nil {
		return Forge{}, err
	}
	f := Forge{
		Credentials:          creds,
		WebhookSecret:        getenv("WEBHOOK_SECRET"),
		ReceiverBind:         strings.TrimSpace(getenv("RECEIVER_BIND")),
		GitLabWebhookMode:    strings.TrimSpace(getenv("GITLAB_WEBHOOK_MODE")),
		GitLabWebhookSecret:  getenv("GITLAB_WEBHOOK_SECRET"),
		ForgejoWebhookSecret: getenv("FORGEJO_WEBHOOK_SECRET"),
	}
	fail := func(v, value, format string, args ...any) (Forge, error) {
		return Forge{}, forgeError(v, value, fmt.Sprintf(format, args...))
	}
	if f.ReceiverBind == "" {
		f.ReceiverBind = DefaultReceiverBind
	} else if net.ParseIP(f.ReceiverBind) == nil && f.ReceiverBind != "localhost" {
		return fail("RECEIVER_BIND", f.ReceiverBind, "must be an IP address such as 0.0.0.0 or 127.0.0.1")
	}
	f.ReceiverPort = DefaultReceiverPort
	if v := strings.TrimSpace(getenv("RECEIVER_PORT")); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 || p > 65535 {
			return fail("RECEIVER_PORT", v, "must be a port number from 1 to 65535")
		}
		f.ReceiverPort = p
	}

	seen := map[string]bool{}
	for _, r := range strings.Split(getenv("POLL_REPOS"), ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		if strings.Count(r, "/") != 1 || !check.Repo(r) {
			return fail("POLL_REPOS", getenv("POLL_REPOS"), "%s is not owner/name", check.Quote(r))
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
			return fail("POLL_INTERVAL_SECONDS", v, "must be a whole number of seconds from %d to 86400", MinPollIntervalSeconds)
		}
		secs = n
	}
	f.PollInterval = time.Duration(secs) * time.Second

	if err := f.loadInbox(getenv); err != nil {
		return Forge{}, err
	}
	if v := strings.TrimSpace(getenv("RECEIVER_STATUS_COMMENT")); v != "" {
		off, rule := parseOnOff(v)
		if rule != "" {
			return fail("RECEIVER_STATUS_COMMENT", v, "%s: off keeps the receiver's tokens read-only, and the worker writes the status comment", rule)
		}
		f.NoStatusComment = off
	}

	switch f.GitLabWebhookMode {
	case "", "token", "signature":
	default:
		return fail("GITLAB_WEBHOOK_MODE", f.GitLabWebhookMode, "must be token or signature")
	}
	if f.GitLabWebhookSecret != "" && f.GitLabWebhookMode == "" {
		return fail("GITLAB_WEBHOOK_MODE", "", "required with GITLAB_WEBHOOK_SECRET: token (X-Gitlab-Token) or signature (signing token)")
	}
	if f.GitLabWebhookMode != "" && f.GitLabWebhookSecret == "" {
		return fail("GITLAB_WEBHOOK_SECRET", "", "required with GITLAB_WEBHOOK_MODE")
	}
	if f.GitLabWebhookSecret != "" && creds.GitLab == nil {
		return fail("GITLAB_TOKEN", "", "required with GITLAB_WEBHOOK_SECRET: permissions are checked with it")
	}
	if f.ForgejoWebhookSecret != "" && creds.Forgejo == nil {
		return fail("FORGEJO_URL", "", "FORGEJO_URL and FORGEJO_TOKEN are required with FORGEJO_WEBHOOK_SECRET")
	}
	if f.WebhookSecret != "" && creds.GitHub == nil {
		return fail("GITHUB_AUTH_SOURCE", "", "a credential (pat or app) is required with WEBHOOK_SECRET: permissions are checked with it")
	}
	if len(f.PollRepos) > 0 && creds.GitHub == nil {
		return fail("GITHUB_AUTH_SOURCE", "", "a credential (pat or app) is required with POLL_REPOS")
	}
	return f, nil
}

// loadInbox reads the receiver's inbox variables: RECEIVER_STORE_TIMEOUT,
// RECEIVER_SPOOL_DIR, RECEIVER_SPOOL_MAX and RECEIVER_INBOX_MAX.
func (f *Forge) loadInbox(getenv func(string) string) error {
	f.StoreTimeout = DefaultReceiverStoreTimeout
	if v := strings.TrimSpace(getenv("RECEIVER_STORE_TIMEOUT")); v != "" {
		d, rule := check.Duration(v)
		if rule == "" && (d < MinReceiverStoreTimeout || d > MaxReceiverStoreTimeout) {
			rule = fmt.Sprintf("must be from %s to %s, so a delivery is answered within 2 seconds", MinReceiverStoreTimeout, MaxReceiverStoreTimeout)
		}
		if rule != "" {
			return forgeError("RECEIVER_STORE_TIMEOUT", v, rule)
		}
		f.StoreTimeout = d
	}
	f.SpoolDir = strings.TrimSpace(getenv("RECEIVER_SPOOL_DIR"))
	if f.SpoolDir == "" {
		f.SpoolDir = DefaultSpoolDir(getenv)
		f.SpoolVolatile = absEnvDir(getenv("XDG_STATE_HOME")) == "" && absEnvDir(getenv("HOME")) == ""
	} else if rule := check.AbsClean(f.SpoolDir); rule != "" {
		return forgeError("RECEIVER_SPOOL_DIR", f.SpoolDir, rule)
	}
	f.SpoolMax = DefaultReceiverSpoolMax
	if v := strings.TrimSpace(getenv("RECEIVER_SPOOL_MAX")); v != "" {
		n, rule := parseMemory(v)
		if rule == "" && (n < MinReceiverSpoolMax || n > MaxReceiverSpoolMax) {
			rule = "must be between 4m and 1t"
		}
		if rule != "" {
			return forgeError("RECEIVER_SPOOL_MAX", v, rule)
		}
		f.SpoolMax = n
	}
	f.InboxMax = DefaultReceiverInboxMax
	if v := strings.TrimSpace(getenv("RECEIVER_INBOX_MAX")); v != "" {
		n, rule := check.PlainInt(v)
		if rule == "" && (n < MinReceiverInboxMax || n > MaxReceiverInboxMax) {
			rule = fmt.Sprintf("must be from %d to %d", MinReceiverInboxMax, MaxReceiverInboxMax)
		}
		if rule != "" {
			return forgeError("RECEIVER_INBOX_MAX", v, rule)
		}
		f.InboxMax = int(n)
	}
	return nil
}

func positive(name, v string) (int64, error) {
	v = strings.TrimSpace(v)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, forgeError(name, v, "must be a positive integer")
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
		return "", forgeError(name, v, "must be an http(s) URL without credentials, query or fragment")
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
	github := ""
	if f.Credentials.GitHub != nil {
		github = f.Credentials.GitHub.Source
	}
	return fmt.Sprintf("receiver=%s github=%s(%s) secret=%s poll=%d/%s gitlab=%s(%s) forgejo=%s spool=%s",
		f.ReceiverAddr(), github, f.Credentials.GitHubAPIURL, set(f.WebhookSecret), len(f.PollRepos), f.PollInterval,
		f.GitLabWebhookMode, f.Credentials.GitLabURL, set(f.ForgejoWebhookSecret), f.SpoolDir)
}
