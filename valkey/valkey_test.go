package valkey_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/valkey"
)

func TestNewClientURLForms(t *testing.T) {
	for _, tc := range []struct {
		url, network, addr string
		db                 int
		tls                bool
	}{
		{"redis://127.0.0.1:6380/3", "tcp", "127.0.0.1:6380", 3, false},
		{"redis://v", "tcp", "v:6379", 0, false},
		{"rediss://v:6390/1", "tcp", "v:6390", 1, true},
		{"unix:///run/valkey/valkey.sock?db=2", "unix", "/run/valkey/valkey.sock", 2, false},
	} {
		c, err := valkey.NewClient(tc.url, valkey.Options{})
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		o := c.Options()
		if o.Network != tc.network || o.Addr != tc.addr || o.DB != tc.db || (o.TLSConfig != nil) != tc.tls {
			t.Errorf("%s: network %s addr %s db %d tls %t", tc.url, o.Network, o.Addr, o.DB, o.TLSConfig != nil)
		}
		if !o.ContextTimeoutEnabled || o.DialTimeout != valkey.DialTimeout {
			t.Errorf("%s: ContextTimeoutEnabled %t DialTimeout %s", tc.url, o.ContextTimeoutEnabled, o.DialTimeout)
		}
		_ = c.Close()
	}
}

func TestNewClientBadURL(t *testing.T) {
	for _, raw := range []string{
		"redis://:s3cret@127.0.0.1:notaport/0",
		"http://:s3cret@127.0.0.1:6379",
		"redis://:s3cret@127.0.0.1:6379/a/b",
		"redis://:s3cret@127.0.0.1:6379/?master_name=",
		"redis://:s3cret@127.0.0.1:6379/?bogus=1",
	} {
		_, err := valkey.NewClient(raw, valkey.Options{})
		var ue *valkey.URLError
		if !errors.As(err, &ue) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: %v", raw, err)
		}
	}
}

// The URL's password wins; Options.Password fills in when the URL has none.
// Only a client without a password pings each new connection.
func TestNewClientPasswordRule(t *testing.T) {
	for _, tc := range []struct{ url, opt, want string }{
		{"redis://:inurl@v:6379", "fromenv", "inurl"},
		{"redis://user:inurl@v:6379", "", "inurl"},
		{"redis://v:6379", "fromenv", "fromenv"},
		{"unix://:inurl@/tmp/v.sock", "fromenv", "inurl"},
		{"redis://v:6379", "", ""},
	} {
		c, err := valkey.NewClient(tc.url, valkey.Options{Password: tc.opt})
		if err != nil {
			t.Fatal(err)
		}
		o := c.Options()
		if o.Password != tc.want || (o.OnConnect == nil) != (tc.want != "") {
			t.Errorf("%s with %q: password %q, OnConnect set %t", tc.url, tc.opt, o.Password, o.OnConnect != nil)
		}
		_ = c.Close()
	}
}

func TestNewClientOneShot(t *testing.T) {
	c, err := valkey.NewClient("redis://v:6379/0?dial_timeout=5s", valkey.Options{OneShot: true, PoolSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o := c.Options() // go-redis stores MaxRetries -1 (none) as 0
	if o.DialTimeout != 5*time.Second || o.ReadTimeout != valkey.OneShotTimeout || o.WriteTimeout != valkey.OneShotTimeout ||
		o.MaxRetries != 0 || o.DialerRetries != 1 || !o.DisableIdentity || o.PoolSize != 4 {
		t.Fatalf("one-shot options: %+v", o)
	}
	long, err := valkey.NewClient("redis://v:6379/0", valkey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close()
	if lo := long.Options(); lo.MaxRetries != 1 || lo.DisableIdentity {
		t.Fatalf("long-running options: MaxRetries %d DisableIdentity %t", lo.MaxRetries, lo.DisableIdentity)
	}
}

// requirePass starts a private redis-server that requires pw.
func requirePass(t *testing.T, pw string) *livetest.Server {
	t.Helper()
	srv := livetest.StartServer(t)
	if err := srv.Client().ConfigSet(context.Background(), "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	return srv
}

// authRefused checks err is an *AuthError naming the fix and the server's
// reply, and not a redis.Error (it must never read as a command's answer).
func authRefused(t *testing.T, what string, err error, reply string) {
	t.Helper()
	var ae *valkey.AuthError
	var re redis.Error
	if !errors.Is(err, valkey.ErrAuthRefused) || !errors.As(err, &ae) || !strings.HasPrefix(ae.Reply, reply) || errors.As(err, &re) {
		t.Fatalf("%s: %T %v", what, err, err)
	}
	if !strings.Contains(err.Error(), "set VALKEY_PASSWORD or put the password in VALKEY_URL") {
		t.Fatalf("%s: the message names no fix: %v", what, err)
	}
}

func TestNewClientAuthRefused(t *testing.T) {
	srv := requirePass(t, "pw1")
	ctx := context.Background()
	for _, tc := range []struct{ url, pw, reply string }{
		{srv.URL(), "", "NOAUTH"},
		{srv.URL(), "wrong", "WRONGPASS"},
		{"redis://:wrong@" + srv.Addr() + "/0", "pw1", "WRONGPASS"}, // the URL's wins
		{"redis://" + srv.Addr() + "/2", "", "NOAUTH"},              // SELECT in the handshake
	} {
		c, err := valkey.NewClient(tc.url, valkey.Options{Password: tc.pw, OneShot: true})
		if err != nil {
			t.Fatal(err)
		}
		authRefused(t, tc.url+" ping", c.Ping(ctx).Err(), tc.reply)
		// A long command on a fresh connection: still the refusal, never EOF.
		args := make([]any, 0, 40)
		for i := range 20 {
			args = append(args, "k", i)
		}
		authRefused(t, tc.url+" mset", c.MSet(ctx, args...).Err(), tc.reply)
		var set *redis.StatusCmd
		var get *redis.StringCmd
		_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			set = p.Set(ctx, "k", "v", 0)
			get = p.Get(ctx, "k")
			return nil
		})
		authRefused(t, tc.url+" exec", err, tc.reply)
		authRefused(t, tc.url+" queued set", set.Err(), tc.reply)
		authRefused(t, tc.url+" queued get", get.Err(), tc.reply)
		cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, "n")
			p.Incr(ctx, "n")
			return nil
		})
		authRefused(t, tc.url+" pipeline", err, tc.reply)
		for _, cmd := range cmds {
			authRefused(t, tc.url+" pipelined incr", cmd.Err(), tc.reply)
		}
		_ = c.Close()
	}
	for _, c := range []struct{ url, pw string }{{srv.URL(), "pw1"}, {"redis://:pw1@" + srv.Addr() + "/1", ""}} {
		ok, err := valkey.NewClient(c.url, valkey.Options{Password: c.pw})
		if err != nil {
			t.Fatal(err)
		}
		if err := ok.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatalf("with the password: %v", err)
		}
		_ = ok.Close()
	}
	admin, err := valkey.NewClient(srv.URL(), valkey.Options{Password: "pw1"})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if n, err := admin.Exists(ctx, "k", "n").Result(); err != nil || n != 1 {
		t.Fatalf("refused commands changed the keyspace: %d keys (%v)", n, err)
	}
}

// A plain go-redis error reply that is not an authentication refusal stays
// a reply.
func TestNewClientOtherRepliesUntouched(t *testing.T) {
	srv := livetest.StartServer(t)
	c, err := valkey.NewClient(srv.URL(), valkey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "s", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err = c.Incr(ctx, "s").Err()
	var re redis.Error
	if !errors.As(err, &re) || valkey.IsAuthRefused(err) {
		t.Fatalf("incr of a string: %T %v", err, err)
	}
}

// NewClient refuses what VALKEY_URL's rule refuses (internal/check): a URL
// the configuration would reject is never handed to go-redis, which reads
// some of them differently (a fragment, a host on a unix:// URL).
func TestNewClientAppliesTheConfigURLRule(t *testing.T) {
	for _, raw := range []string{
		"redis://:pa#ss@127.0.0.1:6379/0",
		"unix://host/run/valkey.sock",
		"unix:///run/valkey/",
		"redis://127.0.0.1:0",
		"redis://:6379",
		"redis://127.0.0.1:6379/01",
	} {
		_, err := valkey.NewClient(raw, valkey.Options{})
		var ue *valkey.URLError
		if !errors.As(err, &ue) || strings.Contains(err.Error(), "pa#ss") {
			t.Errorf("%s: %v, want a *URLError", raw, err)
		}
	}
}
