package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/inbox"
	"github.com/pidispatch/pidispatch/forge/poller"
	"github.com/pidispatch/pidispatch/forge/receiver"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/valkey"
)

// PermissionCacheTTL is how long a forge's answer about one person's
// permission is reused: a burst of events costs one lookup, and a revoked
// permission stops counting within it.
const PermissionCacheTTL = 60 * time.Second

// selfLookupTimeout bounds asking each forge who the service's own user is.
const selfLookupTimeout = 30 * time.Second

// IntakePlan is a forge intake's configuration, read and checked with
// nothing dialled: the triggers file's forge triggers, what is served, and
// how each forge is read. PlanIntake makes one; Build wires it.
type IntakePlan struct {
	cfg      config.Config
	forge    config.Forge
	triggers []cronsync.ForgeTrigger
	perms    map[jobs.Forge]forge.Permissions
	ghTokens forge.Tokens     // GitHub's reading tokens (the poller's too), nil without GitHub
	ghApp    *token.GitHubApp // set in GitHub App mode
}

// PlanIntake reads and checks an intake's configuration: the triggers file
// (PI_TRIGGERS_FILE) must parse, something must be received (a webhook
// secret or POLL_REPOS), and a GitHub App's key must load. Every refusal is a
// *config.ConfigError or config.ConfigErrors naming the variable.
func PlanIntake(cfg config.Config, fc config.Forge) (*IntakePlan, error) {
	triggers, err := readForgeTriggers(cfg.TriggersFile)
	if err != nil {
		return nil, err
	}
	catalog, err := cfg.Flows()
	if err != nil {
		return nil, err
	}
	if err := CheckTriggerFlows(cfg.TriggersFile, catalog); err != nil {
		return nil, err
	}
	if !serving(fc) && len(fc.PollRepos) == 0 {
		return nil, &config.ConfigError{Var: "WEBHOOK_SECRET", Rule: "nothing to receive: set WEBHOOK_SECRET, GITLAB_WEBHOOK_SECRET, FORGEJO_WEBHOOK_SECRET or POLL_REPOS (docs/forges.md)"}
	}
	if err := checkCanSign(cfg); err != nil {
		return nil, err
	}
	p := &IntakePlan{cfg: cfg, forge: fc, triggers: triggers, perms: map[jobs.Forge]forge.Permissions{}}
	if err := p.planReaders(); err != nil {
		return nil, err
	}
	return p, nil
}

// checkCanSign refuses an intake that could queue only jobs every worker
// refuses: without the fleet key its forge jobs carry no signature, and a
// worker runs them only from a queue the operator opted in
// (PI_UNSIGNED_QUEUES), since anyone who can write to Valkey could queue
// the same.
func checkCanSign(cfg config.Config) error {
	if cfg.FleetKey.IsSet() || fleet.UnsignedAllowed(cfg.UnsignedQueues, fleet.SharedQueue) {
		return nil
	}
	return &config.ConfigError{Var: "PI_FLEET_KEY_FILE", Rule: "must be set to queue forge jobs: workers refuse a job the fleet key did not sign " +
		"(pi-dispatch init writes a key; copy it to every host). To run unsigned jobs anyway, set PI_UNSIGNED_QUEUES=* on the receiver and the workers (docs/security.md)"}
}

// String says what the plan serves, no secret in it.
func (p *IntakePlan) String() string {
	return fmt.Sprintf("%d forge triggers; %s", len(p.triggers), p.forge)
}

// readForgeTriggers reads the forge triggers of the triggers file, each
// problem one *config.ConfigError.
func readForgeTriggers(path string) ([]cronsync.ForgeTrigger, error) {
	if path == "" {
		return nil, &config.ConfigError{Var: "PI_TRIGGERS_FILE", Rule: "must be set: the forge triggers live in that file (docs/triggers.md)"}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &config.ConfigError{Var: "PI_TRIGGERS_FILE", Value: path, Rule: err.Error()}
	}
	fts, err := cronsync.ParseForgeTriggers(data)
	if err != nil {
		var errs config.ConfigErrors
		for _, line := range joinedLines(err) {
			errs = append(errs, &config.ConfigError{Var: "PI_TRIGGERS_FILE", Value: path, Rule: line})
		}
		return nil, errs
	}
	return fts, nil
}

// joinedLines lists the errors of an errors.Join, or err's one message.
func joinedLines(err error) []string {
	var j interface{ Unwrap() []error }
	if !errors.As(err, &j) {
		return strings.Split(err.Error(), "\n")
	}
	var out []string
	for _, e := range j.Unwrap() {
		out = append(out, e.Error())
	}
	return out
}

func serving(fc config.Forge) bool {
	return fc.WebhookSecret != "" || fc.GitLabWebhookSecret != "" || fc.ForgejoWebhookSecret != ""
}

// planReaders sets how each configured forge is read: the permission
// lookups (cached) and, for GitHub, the tokens. In App mode GitHub is read
// with installation tokens restricted to the one repository asked about and
// to reading it, minted again before they expire.
func (p *IntakePlan) planReaders() error {
	creds := p.forge.Credentials
	if gh := creds.GitHub; gh != nil {
		if gh.Source == config.GitHubAuthApp {
			key, err := gh.PrivateKey()
			if err != nil {
				return err
			}
			p.ghApp = &token.GitHubApp{AppID: gh.AppID, InstallationID: gh.InstallationID, Key: key,
				APIURL: gh.APIURL, Permissions: token.IntakePermissions()}
			p.ghTokens = &token.Cache{Minter: p.ghApp}
		} else {
			p.ghTokens = forge.StaticToken(gh.PAT.Reveal())
		}
		p.perms[jobs.ForgeGitHub] = forge.GitHubPermissions{BaseURL: creds.GitHubAPIURL, Tokens: p.ghTokens}
	}
	if gl := creds.GitLab; gl != nil {
		p.perms[jobs.ForgeGitLab] = forge.GitLabPermissions{BaseURL: gl.URL, Tokens: forge.StaticToken(gl.Token.Reveal())}
	}
	if fj := creds.Forgejo; fj != nil {
		p.perms[jobs.ForgeForgejo] = forge.ForgejoPermissions{BaseURL: fj.URL, Tokens: forge.StaticToken(fj.Token.Reveal())}
	}
	for f, perm := range p.perms {
		p.perms[f] = &forge.CachedPermissions{Inner: perm, TTL: PermissionCacheTTL}
	}
	return nil
}

// Intake is a running forge intake: forge events (webhook deliveries to the
// Receiver, the GitHub Poller's reads) matched against the triggers file's
// forge triggers, and each match enqueued for the fleet. Run serves it;
// Close releases its Valkey client and listener.
type Intake struct {
	// Intake matches and enqueues; the receiver and the poller hand it their
	// events.
	Intake *forge.Intake
	// Receiver serves the webhook routes; nil when no webhook secret is set.
	Receiver *receiver.Receiver
	// Inbox keeps every verified delivery the Receiver takes until it is
	// processed (Valkey, or the spool folder while Valkey does not answer);
	// Run drains its spool and processes it. nil with the Receiver.
	Inbox *inbox.Inbox
	// Poller polls POLL_REPOS; nil without it.
	Poller *poller.Poller
	Valkey *redis.Client

	listener     net.Listener
	triggersFile string
	host         string
	log          *slog.Logger
	closeOnce    sync.Once
}

// BuildIntake wires the forge intake the way Build wires a worker: PlanIntake,
// then Build. logger receives every event.
func BuildIntake(ctx context.Context, cfg config.Config, fc config.Forge, logger *slog.Logger) (*Intake, error) {
	p, err := PlanIntake(cfg, fc)
	if err != nil {
		return nil, err
	}
	return p.Build(ctx, logger)
}

// Build wires the plan, in order: the service's own user on each forge
// (its own comments never start a job; a forge that cannot say refuses
// boot), the Valkey client, the enqueue router and the intake, the inbox
// (its spool folder, RECEIVER_SPOOL_DIR, opened and locked), the receiver
// with its listener (RECEIVER_BIND:RECEIVER_PORT), the poller. Nothing runs
// until Run.
func (p *IntakePlan) Build(ctx context.Context, logger *slog.Logger) (*Intake, error) {
	host := p.cfg.WorkerName
	self, err := p.selfIDs(ctx, logger.With("host", host))
	if err != nil {
		return nil, err
	}
	client, err := valkey.NewClient(p.cfg.ValkeyURL, valkey.Options{Password: p.cfg.ValkeyPassword})
	if err != nil {
		return nil, &config.ConfigError{Var: "VALKEY_URL", Value: config.RedactURL(p.cfg.ValkeyURL), Rule: err.Error()}
	}
	in := &Intake{Valkey: client, triggersFile: p.cfg.TriggersFile, host: host, log: logger}
	if err := p.wire(in, self, logger); err != nil {
		in.Close()
		return nil, err
	}
	return in, nil
}

// wire builds the intake's parts onto in's Valkey client.
func (p *IntakePlan) wire(in *Intake, self map[jobs.Forge]int64, logger *slog.Logger) error {
	producer, err := enqueue.NewProducer(in.Valkey, enqueue.ProducerConfig{
		WorkerName: p.cfg.WorkerName, WorkerNameDeclared: p.cfg.WorkerNameDeclared, FleetKey: p.cfg.FleetKey,
		UnsignedQueues: p.cfg.UnsignedQueues, Queue: queue.Config{Layout: queue.Layout(p.cfg.BullMQLayout)}, Logger: logger,
	})
	if err != nil {
		return err
	}
	status, err := p.queuedStatus(in.host, logger)
	if err != nil {
		return err
	}
	in.Intake, err = forge.NewIntake(forge.IntakeConfig{
		Enqueuer: enqueue.NewRouter(producer, enqueue.RouterConfig{}), Permissions: p.perms, Status: status,
		SelfIDs: self, Disarm: forge.FileDisarmer(p.cfg.TriggersFile), Logger: logger, Host: in.host,
		PullRequests: fleetstate.NewPullRequestsWith(in.Valkey, fleetstate.PullRequestsConfig{Key: p.cfg.FleetKey, Logger: logger}),
	})
	if err != nil {
		return err
	}
	in.Intake.SetTriggers(p.triggers)
	fc := p.forge
	if serving(fc) {
		spoolDir := fc.SpoolDir
		if spoolDir == "" {
			spoolDir = config.DefaultSpoolDir(os.Getenv)
		}
		if fc.SpoolVolatile {
			logger.Warn("receiver_spool_volatile", "host", in.host, "dir", spoolDir,
				"why", "no home folder is known: set RECEIVER_SPOOL_DIR to a folder that survives a restart")
		}
		in.Inbox, err = inbox.Open(inbox.Config{
			Valkey: in.Valkey, Handler: in.Intake, SpoolDir: spoolDir, SpoolMax: fc.SpoolMax,
			MaxBody: receiver.DefaultMaxBody, StoreTimeout: fc.StoreTimeout, MaxLength: fc.InboxMax,
			Logger: logger, Host: in.host,
		})
		if err != nil {
			return fmt.Errorf("RECEIVER_SPOOL_DIR: %w", err)
		}
		in.Receiver, err = receiver.New(receiver.Config{
			Intake: in.Intake, Inbox: in.Inbox, MaxBody: receiver.DefaultMaxBody,
			GitHubSecret: fc.WebhookSecret, GitLabMode: fc.GitLabWebhookMode, GitLabSecret: fc.GitLabWebhookSecret,
			ForgejoSecret: fc.ForgejoWebhookSecret, Logger: logger, Host: in.host,
		})
		if err != nil {
			return err
		}
		for _, c := range in.Inbox.Collectors() {
			if err := in.Receiver.Registry().Register(c); err != nil {
				return err
			}
		}
		if in.listener, err = net.Listen("tcp", fc.ReceiverAddr()); err != nil {
			return fmt.Errorf("RECEIVER_BIND/RECEIVER_PORT %s: %w", fc.ReceiverAddr(), err)
		}
	}
	if len(fc.PollRepos) > 0 {
		in.Poller, err = poller.New(poller.Config{
			Repos: fc.PollRepos, Interval: fc.PollInterval, BaseURL: fc.Credentials.GitHubAPIURL, Tokens: p.ghTokens,
			Valkey: in.Valkey, Handler: in.Intake, Logger: logger, Host: in.host,
		})
	}
	return err
}

// queuedStatus is what writes each accepted job's queued status comment
// (RECEIVER_STATUS_COMMENT, on by default): on GitHub with a token minted
// for that one comment, restricted to the job's repository and to issues
// and pull requests (a GitHub App's, revoked right after; a personal token
// is what it is), on Forgejo/Gitea with FORGEJO_TOKEN, on GitLab with
// GITLAB_TOKEN, whose user the workers write and edit every status note
// with too. nil when off, or when no forge configured has one.
func (p *IntakePlan) queuedStatus(host string, logger *slog.Logger) (forge.QueuedStatus, error) {
	if p.forge.NoStatusComment {
		return nil, nil
	}
	creds := p.forge.Credentials
	forges := map[jobs.Forge]workspace.Forge{}
	if gh := creds.GitHub; gh != nil {
		f := workspace.Forge{API: &workspace.GitHub{APIURL: gh.APIURL}, Minter: token.Static{Token: token.New(gh.PAT.Reveal(), time.Time{})}}
		if p.ghApp != nil {
			app := *p.ghApp
			app.Permissions = token.StatusPermissions()
			f.Minter = &app
		}
		forges[jobs.ForgeGitHub] = f
	}
	if fj := creds.Forgejo; fj != nil {
		forges[jobs.ForgeForgejo] = workspace.Forge{API: &workspace.Gitea{URL: fj.URL}, Minter: token.Static{Token: token.New(fj.Token.Reveal(), time.Time{})}}
	}
	if gl := creds.GitLab; gl != nil {
		parent := token.Static{Token: token.New(gl.Token.Reveal(), time.Time{})}
		forges[jobs.ForgeGitLab] = workspace.Forge{API: &workspace.GitLab{URL: gl.URL}, Minter: parent, Status: parent}
	}
	if len(forges) == 0 {
		return nil, nil
	}
	m, err := workspace.New(workspace.Config{Forges: forges, Host: host, Logger: logger})
	if err != nil {
		return nil, err
	}
	return queuedStatus{m}, nil
}

// queuedStatus adapts a workspace.Manager to forge.QueuedStatus.
type queuedStatus struct{ m *workspace.Manager }

func (q queuedStatus) Queued(ctx context.Context, jobID string, job jobs.Job) error {
	_, err := q.m.Queued(ctx, workspace.Job{ID: jobID, Job: job})
	return err
}

func (q queuedStatus) Duplicate(ctx context.Context, jobID string, job jobs.Job, sameAs string) error {
	_, err := q.m.Status(ctx, workspace.Job{ID: jobID, Job: job}, workspace.Status{State: workspace.StatusDuplicate, SameAs: sameAs})
	return err
}

// selfIDs asks each configured forge who the service's own user is (the
// token's user; a GitHub App's bot user). Boot fails without them, or a bot
// could answer itself forever.
func (p *IntakePlan) selfIDs(ctx context.Context, log *slog.Logger) (map[jobs.Forge]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, selfLookupTimeout)
	defer cancel()
	creds := p.forge.Credentials
	lookups := []struct {
		forge jobs.Forge
		on    bool
		get   func() (int64, error)
	}{
		{jobs.ForgeGitHub, creds.GitHub != nil, func() (int64, error) {
			if p.ghApp == nil {
				return forge.GitHubSelfID(ctx, creds.GitHubAPIURL, creds.GitHub.PAT.Reveal(), nil)
			}
			jwt, err := p.ghApp.JWT() // the App writes as its bot user
			if err != nil {
				return 0, err
			}
			return forge.GitHubAppSelfID(ctx, creds.GitHubAPIURL, jwt, nil)
		}},
		{jobs.ForgeGitLab, creds.GitLab != nil, func() (int64, error) {
			return forge.GitLabSelfID(ctx, creds.GitLab.URL, creds.GitLab.Token.Reveal(), nil)
		}},
		{jobs.ForgeForgejo, creds.Forgejo != nil, func() (int64, error) {
			return forge.ForgejoSelfID(ctx, creds.Forgejo.URL, creds.Forgejo.Token.Reveal(), nil)
		}},
	}
	self := map[jobs.Forge]int64{}
	for _, l := range lookups {
		if !l.on {
			continue
		}
		id, err := l.get()
		if err != nil {
			return nil, fmt.Errorf("%s: the token's own user: %w", l.forge, err)
		}
		self[l.forge] = id
		log.Info("self_identity", "forge", l.forge, "id", id)
	}
	return self, nil
}

// Addr is the receiver's listening address, nil when no webhook is served.
func (in *Intake) Addr() net.Addr {
	if in.listener == nil {
		return nil
	}
	return in.listener.Addr()
}

// Run serves the intake until ctx ends or a part fails: the triggers file's
// watch (a valid edit replaces the forge triggers), the receiver, the inbox
// (its spool drained into Valkey, its deliveries processed) and the poller.
// It returns the first part's failure, after every part stopped.
func (in *Intake) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	failed := make(chan error, 4)
	start := func(f func(context.Context) error) {
		wg.Go(func() {
			if err := f(ctx); err != nil {
				failed <- err
				cancel()
			}
		})
	}
	start(func(ctx context.Context) error {
		return cronsync.WatchForge(ctx, in.triggersFile, cronsync.ForgeWatchConfig{Logger: in.log, Host: in.host}, in.Intake.SetTriggers)
	})
	if in.Receiver != nil {
		start(func(ctx context.Context) error { return in.Receiver.Serve(ctx, in.listener) })
	}
	if in.Inbox != nil {
		start(in.Inbox.Run)
	}
	if in.Poller != nil {
		start(in.Poller.Run)
	}
	wg.Wait()
	close(failed)
	return <-failed
}

// Close releases the Valkey client, the spool folder, and the listener when
// Run never served it. Calls after the first do nothing.
func (in *Intake) Close() {
	in.closeOnce.Do(func() {
		if in.listener != nil {
			_ = in.listener.Close()
		}
		if in.Inbox != nil {
			in.Inbox.Close()
		}
		_ = in.Valkey.Close()
	})
}
