// Package valkey builds the Valkey client that every pidispatch binary,
// example and store uses, so that all of them read a URL the same way, apply
// the same password rule and report a refused password the same way.
//
// A refused password is the connection's failure, not a command's answer.
// go-redis reports it as a server reply (NOAUTH, WRONGPASS), and code that
// tells replies from transport failures (a transaction's per-command
// outcomes, "reachable but refused" messages) then takes it for one
// command's refusal. A client from NewClient reports it as an *AuthError
// instead, on every command of a pipeline or transaction, and never as a
// redis.Error.
package valkey

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/internal/check"
)

// ErrAuthRefused is the server refusing the client's authentication: no
// password for a server that requires one, or a wrong one. Branch on it with
// errors.Is; its message names the fix.
var ErrAuthRefused = errors.New("the server refused authentication (set VALKEY_PASSWORD or put the password in VALKEY_URL)")

// AuthError is ErrAuthRefused with the server's own answer.
type AuthError struct {
	// Reply is the server's error reply, e.g. "NOAUTH Authentication
	// required." or "WRONGPASS invalid username-password pair ...".
	Reply string
}

// Error names the fix and the server's error code (NOAUTH, WRONGPASS); the
// rest of the reply can mislead (a refused HELLO explains HELLO's syntax).
func (e *AuthError) Error() string {
	code, _, _ := strings.Cut(e.Reply, " ")
	return ErrAuthRefused.Error() + ": " + code
}

// Is makes errors.Is(err, ErrAuthRefused) hold. AuthError has no Unwrap on
// purpose: it hides the redis.Error it came from (see the package comment),
// and go-redis strips one wrapping off a failed handshake's error, which
// would leave the bare sentinel without the server's reply.
func (e *AuthError) Is(target error) bool { return target == ErrAuthRefused }

// URLError is a URL NewClient cannot use. Its message never quotes the URL,
// which may hold a password.
type URLError struct {
	Reason string
}

func (e *URLError) Error() string {
	return "not a redis://, rediss:// or unix:// URL: " + e.Reason
}

// Fail-fast bounds of a one-shot client (Options.OneShot), and the dial bound
// of every client.
const (
	DialTimeout    = 2 * time.Second
	OneShotTimeout = 2 * time.Second
)

// Options tune NewClient. The zero value is a long-running service's client.
type Options struct {
	// Password is used when the URL carries none (VALKEY_PASSWORD); a
	// password in the URL wins.
	Password string
	// OneShot is a command-line command's client: it must report a dead or
	// hung server within seconds, so reads and writes are bounded by
	// OneShotTimeout, a dead address is dialled once, the first failure is
	// the answer (no retries), and no CLIENT SETINFO round trip is spent per
	// connection. A long-running client retries once and names itself to
	// the server (CLIENT LIST shows the library).
	OneShot bool
	// PoolSize caps the pool; 0 keeps go-redis's default.
	PoolSize int
}

// NewClient parses rawURL and returns a client of that server. The URL must
// pass the rule the configuration applies to VALKEY_URL (internal/check's
// ValkeyURL), and is
// redis://[user:password@]host[:port][/db], rediss:// (TLS) or
// unix://[user:password@]/path/to.sock[?db=N], with go-redis's query options
// (dial_timeout=3s, ...); a master_name query option makes it a Sentinel URL
// (the host is a sentinel, more may follow as addr=host:port), served by a
// failover client. Query options override the defaults set here.
//
// Every client honours context deadlines (ContextTimeoutEnabled), dials
// within DialTimeout, and reports a refused password as an *AuthError. A
// client without a password pings each new connection and fails it when the
// server requires one: left in the pool, such a connection answers NOAUTH or,
// once the server has closed it (Valkey drops an unauthenticated client that
// sends a long command), EOF, which reads as an outage.
func NewClient(rawURL string, o Options) (*redis.Client, error) {
	if rule := check.ValkeyURL(rawURL); rule != "" {
		return nil, &URLError{Reason: rule}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, urlError(err)
	}
	var c *redis.Client
	if u.Query().Has("master_name") {
		c, err = newFailover(rawURL, o)
	} else {
		c, err = newDirect(rawURL, o)
	}
	if err != nil {
		return nil, err
	}
	c.AddHook(authHook{})
	return c, nil
}

func newDirect(rawURL string, o Options) (*redis.Client, error) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, urlError(err)
	}
	if opts.Password == "" {
		opts.Password = o.Password
	}
	t := o.tuning(opts.Password == "")
	t.apply(&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.MaxRetries, &opts.DialerRetries, &opts.PoolSize)
	opts.ContextTimeoutEnabled = true
	opts.DisableIdentity = opts.DisableIdentity || t.disableIdentity
	opts.OnConnect = t.onConnect
	return redis.NewClient(opts), nil
}

func newFailover(rawURL string, o Options) (*redis.Client, error) {
	opts, err := redis.ParseFailoverURL(rawURL)
	if err != nil {
		return nil, urlError(err)
	}
	if opts.MasterName == "" {
		return nil, &URLError{Reason: "master_name is empty"}
	}
	if opts.Password == "" {
		opts.Password = o.Password
	}
	t := o.tuning(opts.Password == "")
	t.apply(&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.MaxRetries, &opts.DialerRetries, &opts.PoolSize)
	opts.ContextTimeoutEnabled = true
	opts.DisableIdentity = opts.DisableIdentity || t.disableIdentity
	opts.OnConnect = t.onConnect
	return redis.NewFailoverClient(opts), nil
}

// tuning is what Options turn into, for either kind of client.
type tuning struct {
	dial, read, write time.Duration
	maxRetries        int
	dialerRetries     int
	poolSize          int
	disableIdentity   bool
	onConnect         func(context.Context, *redis.Conn) error
}

func (o Options) tuning(noPassword bool) tuning {
	t := tuning{dial: DialTimeout, maxRetries: 1, poolSize: o.PoolSize}
	if o.OneShot {
		t.read, t.write = OneShotTimeout, OneShotTimeout
		t.maxRetries = -1   // the first failure is the answer (0 would mean 3)
		t.dialerRetries = 1 // the default dials a dead address five times
		t.disableIdentity = true
	}
	if noPassword {
		t.onConnect = refuseUnauthenticated
	}
	return t
}

// apply sets each field the URL left at its zero value.
func (t tuning) apply(dial, read, write *time.Duration, maxRetries, dialerRetries, poolSize *int) {
	setIfZero(dial, t.dial)
	setIfZero(read, t.read)
	setIfZero(write, t.write)
	setIfZero(maxRetries, t.maxRetries)
	setIfZero(dialerRetries, t.dialerRetries)
	setIfZero(poolSize, t.poolSize)
}

func setIfZero[T comparable](dst *T, v T) {
	var zero T
	if *dst == zero {
		*dst = v
	}
}

// urlError keeps a parse error's reason without the URL it quotes.
func urlError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return &URLError{Reason: strings.TrimPrefix(err.Error(), "redis: ")}
}

// refuseUnauthenticated fails a new connection the server will not serve
// without a password.
func refuseUnauthenticated(ctx context.Context, cn *redis.Conn) error {
	if ae := asAuthError(cn.Ping(ctx).Err()); ae != nil {
		return ae
	}
	return nil
}

// asAuthError returns err as an *AuthError when it is one, or is the server
// refusing authentication; nil otherwise.
func asAuthError(err error) *AuthError {
	if err == nil {
		return nil
	}
	var ae *AuthError
	if errors.As(err, &ae) {
		return ae
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		if strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "WRONGPASS") {
			return &AuthError{Reply: msg}
		}
	}
	return nil
}

// authHook turns a refused authentication, whether it failed the connection
// (its error is then returned by the pipeline but set on no command) or came
// back as a command's reply, into an *AuthError on every command.
type authHook struct{}

func (authHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (authHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if ae := asAuthError(err); ae != nil {
			cmd.SetErr(ae)
			return ae
		}
		return err
	}
}

func (authHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		ae := asAuthError(err)
		for i := 0; ae == nil && i < len(cmds); i++ {
			ae = asAuthError(cmds[i].Err())
		}
		if ae == nil {
			return err
		}
		for _, c := range cmds {
			c.SetErr(ae)
		}
		return ae
	}
}

// IsAuthRefused reports whether err is the server refusing authentication,
// from a client of NewClient or any other go-redis client.
func IsAuthRefused(err error) bool { return asAuthError(err) != nil }
