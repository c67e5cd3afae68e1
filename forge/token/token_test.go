package token_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/token"
)

const secret = "ghs_SECRETVALUE123"

func TestTokenRedacts(t *testing.T) {
	t.Parallel()
	tok := token.New(secret, time.Now().Add(time.Hour))
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("x", "token", tok, "nested", struct{ T token.Token }{tok})
	js, err := json.Marshal(map[string]any{"t": tok})
	require.NoError(t, err)
	for _, s := range []string{
		fmt.Sprint(tok), fmt.Sprintf("%v %+v %#v %s %q %x", tok, tok, tok, tok, tok, tok),
		fmt.Sprintf("%v", struct{ T token.Token }{tok}), fmt.Errorf("wrap: %v", tok).Error(),
		buf.String(), string(js),
	} {
		require.NotContains(t, s, secret)
		require.Contains(t, s, token.Redacted)
	}
	require.Equal(t, secret, tok.Reveal())
}

func TestTokenValid(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	require.False(t, token.Token{}.Valid(now, 0))
	require.True(t, token.New("x", time.Time{}).Valid(now, time.Hour), "no expiry")
	require.True(t, token.New("x", now.Add(3*time.Minute)).Valid(now, 2*time.Minute))
	require.False(t, token.New("x", now.Add(time.Minute)).Valid(now, 2*time.Minute))
}

func TestStatic(t *testing.T) {
	t.Parallel()
	tok, err := token.Static{Token: token.New("pat", time.Time{})}.Mint(context.Background(), "a/b")
	require.NoError(t, err)
	require.Equal(t, "pat", tok.Reveal())
	_, err = token.Static{}.Mint(context.Background(), "a/b")
	require.ErrorIs(t, err, token.ErrRefused)
}

func TestGitHubApp(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	git := forgetest.StartGitServer(t, nil)
	gh := forgetest.StartGitHub(t, git, 9, &key.PublicKey, 30*time.Minute)
	app := &token.GitHubApp{AppID: 9, InstallationID: 1, Key: key, APIURL: gh.URL}

	tok, err := app.Mint(context.Background(), "acme/web")
	require.NoError(t, err)
	require.NotEmpty(t, tok.Reveal())
	require.WithinDuration(t, time.Now().Add(30*time.Minute), tok.Expires(), time.Minute)
	mints := gh.Mints()
	require.Len(t, mints, 1)
	require.Equal(t, []string{"web"}, mints[0].Repositories)
	require.Equal(t, token.PublishPermissions(), mints[0].Permissions)

	other, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	_, err = (&token.GitHubApp{AppID: 9, InstallationID: 1, Key: other, APIURL: gh.URL}).Mint(context.Background(), "acme/web")
	require.ErrorIs(t, err, token.ErrRefused, "a JWT signed by another key")
	_, err = (&token.GitHubApp{AppID: 10, InstallationID: 1, Key: key, APIURL: gh.URL}).Mint(context.Background(), "acme/web")
	require.ErrorIs(t, err, token.ErrRefused, "another app id")

	gh.Fail("POST", "/app/", 502, 1, false)
	_, err = app.Mint(context.Background(), "acme/web")
	require.ErrorIs(t, err, token.ErrUnavailable)
	require.False(t, errors.Is(err, token.ErrRefused))

	_, err = app.Mint(context.Background(), "not-a-repo")
	require.Error(t, err)
}

func TestParsePrivateKey(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	pkcs1 := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	der, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	pkcs8 := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	for _, p := range [][]byte{pkcs1, pkcs8} {
		got, err := token.ParsePrivateKey(p)
		require.NoError(t, err)
		require.True(t, key.Equal(got))
	}
	_, err = token.ParsePrivateKey([]byte("nope"))
	require.Error(t, err)
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		h    http.Header
		want time.Duration
	}{
		{"seconds", http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{"date", http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second},
		{"past date", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0},
		{"huge", http.Header{"Retry-After": {"999999999999"}}, time.Hour},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0},
		{"rate limit reset", http.Header{"X-Ratelimit-Reset": {strconv.FormatInt(now.Add(42*time.Second).Unix(), 10)}}, 42 * time.Second},
		{"none", http.Header{}, 0},
	} {
		if got := token.ParseRetryAfter(c.h, now); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
