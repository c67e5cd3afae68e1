package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/poller"
	"github.com/pidispatch/pidispatch/forge/receiver"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/valkey"
)

func init() {
	register(command{name: "receive", summary: "serve forge webhooks (GitHub, GitLab, Forgejo) and poll GitHub; matching events become jobs", help: receiveHelp, run: runReceive})
}

const receiveHelp = `usage: pi-dispatch receive [--check]

Serves the forge webhook routes on RECEIVER_BIND:RECEIVER_PORT (default
0.0.0.0:3000): /github (WEBHOOK_SECRET), /gitlab (GITLAB_WEBHOOK_MODE and
GITLAB_WEBHOOK_SECRET), /forgejo (FORGEJO_WEBHOOK_SECRET), /healthz and
/metrics. With POLL_REPOS it also polls those GitHub repositories every
POLL_INTERVAL_SECONDS. Events are matched against the forge triggers of
PI_TRIGGERS_FILE (reloaded when the file changes); a match from a person with
write permission (triage for labels) is enqueued for the fleet. With
GITHUB_AUTH_SOURCE=app, GitHub is read with the App's installation tokens
(read-only, one repository each, minted again before they expire) and the
App's bot user is the receiver's own.

  --check   validate the configuration and the triggers file, then exit

Exit codes: 0 stopped by SIGTERM/SIGINT (or --check passed), 1 a runtime
failure, 2 an invalid configuration or triggers file. docs/forges.md.
`

// permissionCacheTTL is how long a forge's answer about one person's
// permission is reused: a burst of events costs one lookup, and a revoked
// permission stops counting within it.
const permissionCacheTTL = 60 * time.Second

func runReceive(ctx context.Context, e env, args []string) int {
	fset := flag.NewFlagSet("receive", flag.ContinueOnError)
	fset.SetOutput(e.stderr)
	fset.Usage = func() { fmt.Fprint(e.stderr, receiveHelp) }
	checkOnly := fset.Bool("check", false, "validate the configuration and the triggers file, then exit")
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(e.stderr, "pi-dispatch receive: unexpected argument %q\n", fset.Arg(0))
		return exitUsage
	}
	cfg, err := config.Load(e.getenv)
	if err != nil {
		printConfigErrors(e.stderr, "pi-dispatch receive", err)
		return exitUsage
	}
	fc, err := config.LoadForge(e.getenv)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch receive: invalid configuration: %v (docs/configuration.md)\n", err)
		return exitUsage
	}
	if cfg.TriggersFile == "" {
		fmt.Fprintln(e.stderr, "pi-dispatch receive: PI_TRIGGERS_FILE is not set: the forge triggers live in that file (docs/triggers.md)")
		return exitUsage
	}
	data, err := os.ReadFile(cfg.TriggersFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch receive: PI_TRIGGERS_FILE: %v\n", err)
		return exitUsage
	}
	fts, err := cronsync.ParseForgeTriggers(data)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch receive: %s is invalid:\n", cfg.TriggersFile)
		for _, line := range splitJoined(err) {
			fmt.Fprintf(e.stderr, "  %s\n", line)
		}
		return exitUsage
	}
	serving := fc.WebhookSecret != "" || fc.GitLabWebhookSecret != "" || fc.ForgejoWebhookSecret != ""
	if !serving && len(fc.PollRepos) == 0 {
		fmt.Fprintln(e.stderr, "pi-dispatch receive: nothing to receive: set WEBHOOK_SECRET, GITLAB_WEBHOOK_SECRET, FORGEJO_WEBHOOK_SECRET or POLL_REPOS (docs/forges.md)")
		return exitUsage
	}
	creds := fc.Credentials
	perms := map[jobs.Forge]forge.Permissions{}
	var ghTokens forge.Tokens
	var ghApp *token.GitHubApp
	if gh := creds.GitHub; gh != nil {
		switch gh.Source {
		case config.GitHubAuthApp:
			key, err := gh.PrivateKey()
			if err != nil {
				fmt.Fprintf(e.stderr, "pi-dispatch receive: invalid configuration: %v (docs/configuration.md)\n", err)
				return exitUsage
			}
			// Installation tokens restricted to the one repository asked
			// about and to reading it, minted again before they expire.
			ghApp = &token.GitHubApp{AppID: gh.AppID, InstallationID: gh.InstallationID, Key: key,
				APIURL: gh.APIURL, Permissions: token.IntakePermissions()}
			ghTokens = &token.Cache{Minter: ghApp}
		default:
			ghTokens = forge.StaticToken(gh.PAT.Reveal())
		}
		perms[jobs.ForgeGitHub] = forge.GitHubPermissions{BaseURL: creds.GitHubAPIURL, Tokens: ghTokens}
	}
	if gl := creds.GitLab; gl != nil {
		perms[jobs.ForgeGitLab] = forge.GitLabPermissions{BaseURL: gl.URL, Tokens: forge.StaticToken(gl.Token.Reveal())}
	}
	if fj := creds.Forgejo; fj != nil {
		perms[jobs.ForgeForgejo] = forge.ForgejoPermissions{BaseURL: fj.URL, Tokens: forge.StaticToken(fj.Token.Reveal())}
	}
	for f, p := range perms {
		perms[f] = &forge.CachedPermissions{Inner: p, TTL: permissionCacheTTL}
	}
	if *checkOnly {
		fmt.Fprintf(e.stdout, "ok: %d forge triggers; %s\n", len(fts), fc)
		return exitOK
	}

	log := slog.New(slog.NewJSONHandler(e.stderr, nil))
	host := cfg.WorkerName
	// The service's own user ids: its own comments and labels never start a
	// job. Boot fails without them, or a bot could answer itself forever.
	self := map[jobs.Forge]int64{}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	for _, r := range []struct {
		forge jobs.Forge
		on    bool
		get   func() (int64, error)
	}{
		{jobs.ForgeGitHub, creds.GitHub != nil, func() (int64, error) {
			if ghApp != nil {
				// The App writes as its bot user.
				jwt, err := ghApp.JWT()
				if err != nil {
					return 0, err
				}
				return forge.GitHubAppSelfID(sctx, creds.GitHubAPIURL, jwt, nil)
			}
			return forge.GitHubSelfID(sctx, creds.GitHubAPIURL, creds.GitHub.PAT.Reveal(), nil)
		}},
		{jobs.ForgeGitLab, creds.GitLab != nil, func() (int64, error) {
			return forge.GitLabSelfID(sctx, creds.GitLab.URL, creds.GitLab.Token.Reveal(), nil)
		}},
		{jobs.ForgeForgejo, creds.Forgejo != nil, func() (int64, error) {
			return forge.ForgejoSelfID(sctx, creds.Forgejo.URL, creds.Forgejo.Token.Reveal(), nil)
		}},
	} {
		if !r.on {
			continue
		}
		id, err := r.get()
		if err != nil {
			scancel()
			fmt.Fprintf(e.stderr, "pi-dispatch receive: %s: the token's own user: %v\n", r.forge, err)
			return exitFailure
		}
		self[r.forge] = id
		log.Info("self_identity", "host", host, "forge", r.forge, "id", id)
	}
	scancel()
	client, err := valkey.NewClient(cfg.ValkeyURL, valkey.Options{Password: cfg.ValkeyPassword})
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch receive: VALKEY_URL: %v\n", err)
		return exitUsage
	}
	defer client.Close()
	producer, err := enqueue.NewProducer(client, enqueue.ProducerConfig{
		WorkerName: cfg.WorkerName, WorkerNameDeclared: cfg.WorkerNameDeclared, FleetKey: cfg.FleetKey,
		Queue: queue.Config{Layout: queue.Layout(cfg.BullMQLayout)}, Logger: log,
	})
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch receive: %v\n", err)
		return exitUsage
	}
	intake, err := forge.NewIntake(forge.IntakeConfig{
		Enqueuer: enqueue.NewRouter(producer, enqueue.RouterConfig{}), Permissions: perms,
		SelfIDs: self, Disarm: forge.FileDisarmer(cfg.TriggersFile), Logger: log, Host: host,
	})
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch receive: %v\n", err)
		return exitFailure
	}
	intake.SetTriggers(fts)

	var ln net.Listener
	var rcv *receiver.Receiver
	if serving {
		rcv, err = receiver.New(receiver.Config{
			Intake: intake, Replay: receiver.ValkeyReplay{Client: client},
			GitHubSecret: fc.WebhookSecret, GitLabMode: fc.GitLabWebhookMode, GitLabSecret: fc.GitLabWebhookSecret,
			ForgejoSecret: fc.ForgejoWebhookSecret, Logger: log, Host: host,
		})
		if err != nil {
			fmt.Fprintf(e.stderr, "pi-dispatch receive: %v\n", err)
			return exitUsage
		}
		if ln, err = net.Listen("tcp", fc.ReceiverAddr()); err != nil {
			fmt.Fprintf(e.stderr, "pi-dispatch receive: RECEIVER_BIND/RECEIVER_PORT %s: %v\n", fc.ReceiverAddr(), err)
			return exitFailure
		}
	}
	var pl *poller.Poller
	if len(fc.PollRepos) > 0 {
		pl, err = poller.New(poller.Config{
			Repos: fc.PollRepos, Interval: fc.PollInterval, BaseURL: creds.GitHubAPIURL, Tokens: ghTokens,
			Valkey: client, Handler: intake, Logger: log, Host: host,
		})
		if err != nil {
			fmt.Fprintf(e.stderr, "pi-dispatch receive: %v\n", err)
			return exitUsage
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	failed := make(chan error, 3)
	start := func(f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil {
				failed <- err
				cancel()
			}
		}()
	}
	start(func(ctx context.Context) error {
		return cronsync.WatchForge(ctx, cfg.TriggersFile, cronsync.ForgeWatchConfig{Logger: log, Host: host}, intake.SetTriggers)
	})
	if rcv != nil {
		start(func(ctx context.Context) error { return rcv.Serve(ctx, ln) })
	}
	if pl != nil {
		start(pl.Run)
	}
	wg.Wait()
	close(failed)
	if err := <-failed; err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch receive: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// splitJoined lists the errors of an errors.Join.
func splitJoined(err error) []string {
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}
