package token

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-github/v84/github"
)

// GitHubApp mints installation tokens of a GitHub App: each restricted to the
// one repository of the job and to Permissions.
type GitHubApp struct {
	// AppID and InstallationID name the App and its installation.
	AppID          int64
	InstallationID int64
	// Key is the App's private key (RS256).
	Key *rsa.PrivateKey
	// APIURL is the REST API root, e.g. https://api.github.com/ or a GitHub
	// Enterprise Server's https://ghe.example/api/v3/. Empty: api.github.com.
	APIURL string
	// Permissions are what the token may do; nil: PublishPermissions.
	Permissions *github.InstallationPermissions
	// HTTPClient makes the calls; nil: a client that never follows a redirect.
	HTTPClient *http.Client
	// Now is the clock the JWT is dated by; nil: time.Now.
	Now func() time.Time
}

// PublishPermissions are the least a job's publishing needs: push a branch,
// open a pull request, comment on the issue.
func PublishPermissions() *github.InstallationPermissions {
	return &github.InstallationPermissions{
		Contents:     github.Ptr("write"),
		PullRequests: github.Ptr("write"),
		Issues:       github.Ptr("write"),
		Metadata:     github.Ptr("read"),
	}
}

// IntakePermissions are the least the receiver needs: read a person's
// permission on the repository (metadata) and poll its issues and pull
// requests.
func IntakePermissions() *github.InstallationPermissions {
	return &github.InstallationPermissions{
		Metadata:     github.Ptr("read"),
		Issues:       github.Ptr("read"),
		PullRequests: github.Ptr("read"),
	}
}

// StatusPermissions are the least the receiver needs to write a job's
// queued status comment on its issue or pull request, and find one written
// already: nothing that reaches the repository's contents.
func StatusPermissions() *github.InstallationPermissions {
	return &github.InstallationPermissions{
		Metadata:     github.Ptr("read"),
		Issues:       github.Ptr("write"),
		PullRequests: github.Ptr("write"),
	}
}

// ParsePrivateKey reads an App's PEM private key (PKCS#1 or PKCS#8 RSA).
func ParsePrivateKey(pemBytes []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("github app key: no PEM block")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("github app key: %w", err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("github app key: not an RSA key")
	}
	return rk, nil
}

// JWT is the App's own token: RS256, issued a minute in the past (clock
// drift), valid nine minutes.
func (a *GitHubApp) JWT() (string, error) {
	if a.Key == nil || a.AppID <= 0 {
		return "", errors.New("github app: app id and key required")
	}
	now := a.now()
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`))
	claims, err := json.Marshal(map[string]any{
		"iat": now.Add(-time.Minute).Unix(),
		"exp": now.Add(9 * time.Minute).Unix(),
		"iss": fmt.Sprint(a.AppID),
	})
	if err != nil {
		return "", err
	}
	signing := header + "." + base64.RawURLEncoding.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, a.Key, crypto.SHA256, sum[:])
	if err != nil {
		return "", err
	}
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// Mint asks for an installation token restricted to repo ("owner/name").
func (a *GitHubApp) Mint(ctx context.Context, repo string) (Token, error) {
	_, name, ok := strings.Cut(repo, "/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return Token{}, fmt.Errorf("github app: repository %q is not owner/name", repo)
	}
	jwt, err := a.JWT()
	if err != nil {
		return Token{}, err
	}
	client, err := NewGitHubClient(a.APIURL, a.HTTPClient, jwt)
	if err != nil {
		return Token{}, err
	}
	perms := a.Permissions
	if perms == nil {
		perms = PublishPermissions()
	}
	it, resp, err := client.Apps.CreateInstallationToken(ctx, a.InstallationID, &github.InstallationTokenOptions{
		Repositories: []string{name},
		Permissions:  perms,
	})
	if err != nil {
		err = ClassifyHTTP(resp, err)
		if resp != nil && resp.StatusCode == http.StatusUnprocessableEntity {
			// GitHub's answer for a repository the installation does not include.
			err = fmt.Errorf("%w: %w", ErrNoRepository, err)
		}
		return Token{}, fmt.Errorf("github app installation token: %w", err)
	}
	return New(it.GetToken(), it.GetExpiresAt().Time), nil
}

// Revoke revokes an installation token (the token revokes itself).
func (a *GitHubApp) Revoke(ctx context.Context, _ string, t Token) error {
	client, err := NewGitHubClient(a.APIURL, a.HTTPClient, t.Reveal())
	if err != nil {
		return err
	}
	resp, err := client.Apps.RevokeInstallationToken(ctx)
	if err != nil {
		return fmt.Errorf("github app revoke: %w", ClassifyHTTP(resp, err))
	}
	return nil
}

func (a *GitHubApp) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// NewGitHubClient makes a go-github client for apiURL (empty: api.github.com)
// that sends bearer and never follows a redirect, so a credential never
// leaves for another host.
func NewGitHubClient(apiURL string, hc *http.Client, bearer string) (*github.Client, error) {
	if hc == nil {
		hc = NoRedirectClient()
	}
	c := github.NewClient(hc)
	if bearer != "" {
		c = c.WithAuthToken(bearer)
	}
	if apiURL != "" {
		u, err := url.Parse(strings.TrimSuffix(apiURL, "/") + "/")
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("github api url %q: must be an http(s) URL", apiURL)
		}
		c.BaseURL = u
	}
	return c, nil
}

// NoRedirectClient is an HTTP client that answers a redirect as it is,
// without following it, and times out after a minute.
func NoRedirectClient() *http.Client {
	return &http.Client{
		Timeout:       time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// ClassifyHTTP wraps err with ErrRefused (401, 403 without a rate limit),
// ErrNoRepository (404), ErrUnavailable (429, 5xx, 403 rate limited, no
// answer; an *UnavailableError with the wait the forge asked for) or
// ErrRejected (any other 4xx).
func ClassifyHTTP(resp *github.Response, err error) error {
	if resp == nil {
		return ClassifyResponse(nil, err)
	}
	return ClassifyResponse(resp.Response, err)
}

func classifyStatus(status int, rateLimited bool, err error) error {
	switch {
	case status == http.StatusTooManyRequests || status >= 500 || (status == http.StatusForbidden && rateLimited):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return fmt.Errorf("%w: %w", ErrRefused, err)
	case status == http.StatusNotFound:
		return fmt.Errorf("%w: %w", ErrNoRepository, err)
	case status >= 400 && status < 500:
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return err
}

// ClassifyStatus is ClassifyHTTP for a bare status code (other forges' clients).
func ClassifyStatus(status int, err error) error { return classifyStatus(status, false, err) }
