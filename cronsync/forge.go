package cronsync

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/internal/atomicfile"
	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/jobs"
)

// Forge trigger types (on.type of a trigger a forge event fires).
const (
	TypeLabel       = "label"
	TypeComment     = "comment"
	TypePullRequest = "pull_request"
	TypeIssue       = "issue"
)

// Limits of a forge trigger.
const (
	MaxInstructionsBytes = 2000
	MaxForgeRepos        = 100
	MaxLabels            = 32
	MaxPhraseBytes       = 256
)

// ForgeTrigger is one forge trigger of a triggers file: an event rule (on) and
// the job it starts (Job, a template the intake completes with the event's
// repository, number and delivery).
type ForgeTrigger struct {
	// Index is the trigger's position in the file.
	Index int
	// Name is on.id, or "<type>-<index>" when the trigger has none. A job's
	// Trigger field carries it.
	Name string
	// Type is on.type: label, comment, pull_request or issue.
	Type string
	// Forge is run.kind: github, gitlab or forgejo.
	Forge jobs.Forge
	// Repos are the repositories the trigger fires on (on.repos).
	Repos []string
	// Any, All and None select on labels: a label trigger fires when the label
	// just added is in Any (or Any is empty), the labels then on the issue
	// include every one of All, and none of None.
	Any, All, None []string
	// Phrase is a comment trigger's phrase, matched as a substring.
	Phrase string
	// Actions are the pull_request or issue actions in the forge's own words.
	Actions []string
	// ReviewState narrows a review action to one state (approved,
	// changes_requested, commented).
	ReviewState string
	// Number limits an issue trigger to one issue or pull request.
	Number int
	// Once disarms the trigger after its first job.
	Once bool
	// Disarmed is set once a once trigger has fired: it never fires again.
	Disarmed bool
	// Replicas is how many copies of the job one event starts (0: one).
	Replicas int
	// Job is the run object as a job template (kind forge, no repository).
	Job jobs.Job
	// Publish is what the host lets this trigger's jobs publish (the
	// trigger's optional publish object). The zero value is not the default:
	// DefaultForgePublish is.
	Publish ForgePublish
}

// ForgePublish is a forge trigger's publish object: what the host that runs
// the trigger's jobs lets them publish. It is read from the host's own
// triggers file, never from a job.
type ForgePublish struct {
	// AllowCI (allowCi) lets the changes touch CI and automation
	// configuration (workspace.IsCIPath: .github/, .gitlab-ci.yml,
	// .circleci/, Jenkinsfile, CODEOWNERS, ...). Default false: such a
	// change is refused.
	AllowCI bool
	// Draft (draft) opens the pull request as a draft. Default true.
	Draft bool
	// Labels (labels) are the labels a job's labels.json may add or remove;
	// none (the default): every label change is refused.
	Labels []string
}

// DefaultForgePublish is the publish setting of a trigger without one, and
// of a job whose trigger the host does not know: no CI changes, a draft.
var DefaultForgePublish = ForgePublish{AllowCI: false, Draft: true}

// forgeTriggerKeys are a forge trigger's top-level keys.
var forgeTriggerKeys = []string{"on", "run", "publish"}

// forgePublish is the publish object as written.
type forgePublish struct {
	AllowCI *bool    `json:"allowCi"`
	Draft   *bool    `json:"draft"`
	Labels  []string `json:"labels"`
}

// Actions a trigger may name, per forge and type, in the forge's vocabulary.
var (
	prActions = map[jobs.Forge][]string{
		jobs.ForgeGitHub:  {"opened", "synchronize", "reopened", "labeled", "review_submitted", "closed"},
		jobs.ForgeGitLab:  {"open", "update", "reopen", "approved", "close"},
		jobs.ForgeForgejo: {"opened", "synchronized", "reopened", "label_updated", "closed"},
	}
	issueActions = map[jobs.Forge][]string{
		jobs.ForgeGitHub:  {"closed"},
		jobs.ForgeGitLab:  {"close"},
		jobs.ForgeForgejo: {"closed"},
	}
	reviewStates = []string{"approved", "changes_requested", "commented"}
)

var forgeOnKeys = map[string][]string{
	TypeLabel:       {"type", "id", "repos", "any", "all", "none"},
	TypeComment:     {"type", "id", "repos", "phrase"},
	TypePullRequest: {"type", "id", "repos", "actions", "reviewState", "any", "all", "none"},
	TypeIssue:       {"type", "id", "repos", "actions", "number", "once", "disarmed"},
}

// forgeRun is the run object of a forge trigger.
type forgeRun struct {
	Kind           string               `json:"kind"`
	Flow           string               `json:"flow,omitempty"`
	Command        string               `json:"command,omitempty"`
	Task           string               `json:"task,omitempty"`
	Instructions   string               `json:"instructions,omitempty"`
	Replicas       int                  `json:"replicas,omitempty"`
	Ref            string               `json:"ref,omitempty"`
	Image          string               `json:"image,omitempty"`
	SecretsProfile string               `json:"secretsProfile,omitempty"`
	WaitFor        []jobs.WaitCondition `json:"waitFor,omitempty"`
	Resume         bool                 `json:"resume,omitempty"`
	Provider       string               `json:"provider,omitempty"`
	Model          string               `json:"model,omitempty"`
	Models         []string             `json:"models,omitempty"`
	MaxTurns       int                  `json:"maxTurns,omitempty"`
	MaxCostUSD     string               `json:"maxCostUsd,omitempty"`
	Packages       *bool                `json:"packages,omitempty"`
	ExcludeTools   []string             `json:"excludeTools,omitempty"`
	SkillsDir      string               `json:"skillsDir,omitempty"`
	Network        bool                 `json:"network,omitempty"`
}

// DefaultForgeTask is the task of a flow trigger that names none: the flow
// reads the event from its job.
const DefaultForgeTask = "Handle the forge event this job names (repository, number, trigger)."

// ForgeTriggers parses and validates the forge triggers of a parsed file (its
// Others), returning every problem at once as errors.Join of *TriggerError,
// like ParseTriggers. A trigger type no front-end knows is refused.
func ForgeTriggers(t *Triggers) ([]ForgeTrigger, error) {
	var out []ForgeTrigger
	var errs []error
	names := map[string]int{}
	comment := map[jobs.Forge]int{}
	for _, o := range t.Others {
		p := &triggerParser{index: o.Index}
		ft, ok := p.parseForge(o)
		if ok {
			p.claimID(names, ft.Name)
			if ft.Type == TypeComment {
				if first, dup := comment[ft.Forge]; dup {
					p.fail("on.type", "one comment trigger per forge; triggers[%d] is the %s one", first, ft.Forge)
				} else {
					comment[ft.Forge] = o.Index
				}
			}
		}
		if len(p.errs) > 0 {
			errs = append(errs, p.errs...)
			continue
		}
		out = append(out, ft)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// ParseForgeTriggers reads a whole triggers file and returns its forge
// triggers; cron triggers are checked too (a file is valid or not as a whole).
func ParseForgeTriggers(data []byte) ([]ForgeTrigger, error) {
	t, err := ParseTriggers(data)
	if err != nil {
		return nil, err
	}
	return ForgeTriggers(t)
}

// parseForge checks one forge trigger, reporting every problem in p.errs; ok is false when it has one.
func (p *triggerParser) parseForge(o Other) (ForgeTrigger, bool) {
	ft := ForgeTrigger{Index: o.Index, Type: o.Type}
	trig, _ := object(o.Raw)
	on, _ := object(trig["on"])
	known, ok := forgeOnKeys[o.Type]
	if !ok {
		p.fail("on.type", "unknown type %s (want cron, label, comment, pull_request or issue)", check.Quote(o.Type))
		return ft, false
	}
	ft.Name = p.forgeName(on, o)
	p.unknownKeys("", trig, forgeTriggerKeys)
	ft.Publish = p.forgePublish(trig)
	p.unknownKeys("on", on, known)
	// run first: the forge decides the vocabulary of on.actions.
	run, ok := p.forgeRunObject(trig)
	if !ok {
		return ft, false
	}
	ft.Forge = p.forgeKind(run.Kind, o.Type)
	p.forgeOn(on, &ft)
	p.forgeRun(run, &ft)
	return ft, len(p.errs) == 0
}

// forgeName returns on.id, or "<type>-<index>" without one, and sets p.id so later messages name it.
func (p *triggerParser) forgeName(on map[string]json.RawMessage, o Other) string {
	name := ""
	if id, ok := stringValue(on["id"]); ok && id != "" {
		if !check.Name(id) {
			p.fail("on.id", "must match %s (at most %d bytes)", check.NameSyntax, check.MaxNameLen)
		} else {
			p.id, name = id, id
		}
	} else if _, present := on["id"]; present {
		p.fail("on.id", "must be a non-empty string")
	}
	if name == "" {
		name = fmt.Sprintf("%s-%d", strings.ReplaceAll(o.Type, "_", "-"), o.Index)
	}
	return name
}

// forgePublish reads the publish object over DefaultForgePublish, as the host, not the job, decides it.
func (p *triggerParser) forgePublish(trig map[string]json.RawMessage) ForgePublish {
	out := DefaultForgePublish
	raw, present := trig["publish"]
	if !present {
		return out
	}
	var pub forgePublish
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		p.fail("publish", "must be an object {\"allowCi\": bool, \"draft\": bool, \"labels\": [...]}")
	} else if err := check.DecodeStrict(raw, MaxFileBytes, &pub); err != nil {
		p.fail("publish", "%s", err)
	} else {
		if pub.AllowCI != nil {
			out.AllowCI = *pub.AllowCI
		}
		if pub.Draft != nil {
			out.Draft = *pub.Draft
		}
		out.Labels = p.publishLabels(pub.Labels)
	}
	return out
}

// publishLabels checks publish.labels: at most MaxLabels labels, each a
// label's text, none twice.
func (p *triggerParser) publishLabels(list []string) []string {
	if len(list) > MaxLabels {
		p.fail("publish.labels", "at most %d entries", MaxLabels)
		return nil
	}
	for i, s := range list {
		if rule := labelRule(s); rule != "" {
			p.fail(fmt.Sprintf("publish.labels[%d]", i), "%s", rule)
		} else if slices.Index(list, s) < i {
			p.fail(fmt.Sprintf("publish.labels[%d]", i), "%s is listed twice", check.Quote(s))
		}
	}
	return list
}

// forgeRunObject decodes run strictly; ok is false when there is no run object to check further.
func (p *triggerParser) forgeRunObject(trig map[string]json.RawMessage) (run forgeRun, ok bool) {
	runRaw, present := trig["run"]
	if !present {
		p.fail("run", "required")
		return run, false
	}
	if err := check.DecodeStrict(runRaw, MaxFileBytes, &run); err != nil {
		p.fail("run", "%s", err)
		return run, false
	}
	return run, true
}

// forgeKind returns run.kind as a forge, or "" (reported), since the forge decides on.actions.
func (p *triggerParser) forgeKind(kind, typ string) jobs.Forge {
	switch jobs.Forge(kind) {
	case jobs.ForgeGitHub, jobs.ForgeGitLab, jobs.ForgeForgejo:
		return jobs.Forge(kind)
	case "":
		p.fail("run.kind", "required on a %s trigger (github, gitlab or forgejo)", typ)
	default:
		p.fail("run.kind", "%s is not a forge (want github, gitlab or forgejo)", check.Quote(kind))
	}
	return ""
}

// strings reads on.key as at most max unique strings that each pass each, which returns a rule or "".
func (p *triggerParser) strings(on map[string]json.RawMessage, key string, max int, each func(string) string) []string {
	list := fieldReader{p: p, obj: on, prefix: "on"}.strs(key)
	if list == nil {
		return nil
	}
	if len(list) > max {
		p.fail("on."+key, "at most %d entries", max)
		return nil
	}
	for i, s := range list {
		if rule := each(s); rule != "" {
			p.fail(fmt.Sprintf("on.%s[%d]", key, i), "%s", rule)
		} else if slices.Index(list, s) < i {
			p.fail(fmt.Sprintf("on.%s[%d]", key, i), "%s is listed twice", check.Quote(s))
		}
	}
	return list
}

func labelRule(s string) string {
	if s == "" || len(s) > 255 || !utf8Printable(s) {
		return "must be 1-255 bytes of printable text"
	}
	return ""
}

func utf8Printable(s string) bool {
	return check.Text(s, 255) == "" && !strings.ContainsAny(s, "\n\r\t")
}

// forgeOn checks a forge trigger's event rule into ft, after its forge, which words on.actions.
func (p *triggerParser) forgeOn(on map[string]json.RawMessage, ft *ForgeTrigger) {
	f := fieldReader{p: p, obj: on, prefix: "on"}
	p.forgeRepos(on, ft)
	p.forgeLabels(on, ft)
	switch ft.Type {
	case TypeComment:
		p.forgePhrase(on, ft)
	case TypePullRequest, TypeIssue:
		p.forgeActions(on, ft)
	}
	p.forgeReviewState(on, ft)
	p.forgeNumber(on, ft)
	if once, ok := f.boolean("once"); ok {
		ft.Once = once
		if once && ft.Number == 0 {
			p.fail("on.once", "needs on.number: a one-shot rule is about one issue")
		}
	}
	if raw, present := on["disarmed"]; present {
		if _, ok := object(raw); !ok {
			p.fail("on.disarmed", "must be an object {at, jobId}; delete it to re-arm the trigger")
		}
		ft.Disarmed = true
	}
}

// forgeRepos reads on.repos, which is required: a trigger serves only the repositories it names.
func (p *triggerParser) forgeRepos(on map[string]json.RawMessage, ft *ForgeTrigger) {
	ft.Repos = p.strings(on, "repos", MaxForgeRepos, func(s string) string {
		if !check.Repo(s) {
			return "must be owner/name (groups allowed on GitLab)"
		}
		return ""
	})
	if _, present := on["repos"]; !present {
		p.fail("on.repos", "required: the repositories this trigger serves")
	} else if len(ft.Repos) == 0 && len(p.errs) == 0 {
		p.fail("on.repos", "must name at least one repository")
	}
}

// forgeLabels reads the label selectors; a label trigger needs any or all, or it would fire on every label.
func (p *triggerParser) forgeLabels(on map[string]json.RawMessage, ft *ForgeTrigger) {
	ft.Any = p.strings(on, "any", MaxLabels, labelRule)
	ft.All = p.strings(on, "all", MaxLabels, labelRule)
	ft.None = p.strings(on, "none", MaxLabels, labelRule)
	if ft.Type == TypeLabel && len(ft.Any) == 0 && len(ft.All) == 0 {
		p.fail("on.any", "a label trigger needs any or all")
	}
}

// forgePhrase reads a comment trigger's phrase, which must be more than spaces to select comments.
func (p *triggerParser) forgePhrase(on map[string]json.RawMessage, ft *ForgeTrigger) {
	phrase, ok := stringValue(on["phrase"])
	switch {
	case !ok:
		p.fail("on.phrase", "required: a string the comment must contain")
	case strings.TrimSpace(phrase) == "" || len(phrase) > MaxPhraseBytes || check.Text(phrase, MaxPhraseBytes) != "":
		p.fail("on.phrase", "must be 1-%d bytes of text, not only spaces", MaxPhraseBytes)
	default:
		ft.Phrase = phrase
	}
}

// forgeActions reads on.actions in the forge's words; an issue trigger without them takes every one.
func (p *triggerParser) forgeActions(on map[string]json.RawMessage, ft *ForgeTrigger) {
	vocab := prActions[ft.Forge]
	if ft.Type == TypeIssue {
		vocab = issueActions[ft.Forge]
	}
	ft.Actions = p.strings(on, "actions", 8, func(s string) string {
		if ft.Forge != "" && !slices.Contains(vocab, s) {
			return fmt.Sprintf("%s is not a %s %s action (want one of %s)", check.Quote(s), ft.Forge, ft.Type, strings.Join(vocab, " "))
		}
		return ""
	})
	if len(ft.Actions) == 0 {
		if ft.Type == TypeIssue && ft.Forge != "" {
			ft.Actions = vocab
		} else if _, present := on["actions"]; !present {
			p.fail("on.actions", "required: the %s actions that fire it", ft.Type)
		}
	}
}

// forgeReviewState reads on.reviewState, which only narrows the review_submitted action.
func (p *triggerParser) forgeReviewState(on map[string]json.RawMessage, ft *ForgeTrigger) {
	raw, present := on["reviewState"]
	if !present {
		return
	}
	s, _ := stringValue(raw)
	switch {
	case !slices.Contains(reviewStates, s):
		p.fail("on.reviewState", "must be one of %s", strings.Join(reviewStates, " "))
	case !slices.Contains(ft.Actions, "review_submitted"):
		p.fail("on.reviewState", "only with the review_submitted action (github)")
	default:
		ft.ReviewState = s
	}
}

// forgeNumber reads on.number, the one issue or pull request a trigger may be limited to.
func (p *triggerParser) forgeNumber(on map[string]json.RawMessage, ft *ForgeTrigger) {
	raw, present := on["number"]
	if !present {
		return
	}
	var n int
	if json.Unmarshal(raw, &n) != nil || n < 1 || n > jobs.MaxForgeNumber {
		p.fail("on.number", "must be an integer from 1 to %d", jobs.MaxForgeNumber)
		return
	}
	ft.Number = n
}

func (p *triggerParser) forgeRun(run forgeRun, ft *ForgeTrigger) {
	if run.Instructions != "" && check.Text(run.Instructions, MaxInstructionsBytes) != "" {
		p.fail("run.instructions", "%s", check.Text(run.Instructions, MaxInstructionsBytes))
	}
	if run.Replicas != 0 {
		switch {
		case run.Replicas < 2 || run.Replicas > jobs.MaxReplicas:
			p.fail("run.replicas", "must be 2 to %d when set", jobs.MaxReplicas)
		case ft.Type == TypeIssue:
			p.fail("run.replicas", "an issue trigger starts one job")
		case run.Resume:
			p.fail("run.replicas", "cannot be used with resume (one session per target)")
		default:
			ft.Replicas = run.Replicas
		}
	}
	if ft.Once && ft.Type != TypeIssue {
		p.fail("on.once", "only an issue trigger is one-shot")
	}
	task := run.Task
	if task == "" && run.Flow != "" {
		task = DefaultForgeTask
	}
	ft.Job = jobs.Job{
		Kind: jobs.KindForge, Repo: "owner/name", Ref: run.Ref,
		Flow: run.Flow, Command: run.Command, Task: task, Image: run.Image,
		SecretsProfile: run.SecretsProfile, WaitFor: run.WaitFor, Resume: run.Resume,
		Provider: run.Provider, Model: run.Model, Models: run.Models, MaxTurns: run.MaxTurns,
		MaxCostUSD: run.MaxCostUSD, Packages: run.Packages, ExcludeTools: run.ExcludeTools,
		SkillsDir: run.SkillsDir, Network: run.Network,
		ForgeEvent: jobs.ForgeEvent{Forge: ft.Forge, Trigger: ft.Name, Instructions: run.Instructions},
	}
	if ft.Forge == "" {
		ft.Job.ForgeEvent = jobs.ForgeEvent{}
	}
	// One validator for every job: the worker's.
	if err := ft.Job.Validate(); err != nil {
		var fe *jobs.FieldError
		if errors.As(err, &fe) {
			p.fail("run."+fe.Field, "%s", fe.Rule)
		} else {
			p.fail("run", "%v", err)
		}
	}
	ft.Job.Repo = ""
}

// Disarm writes on.disarmed = {at, jobId} into the trigger at index of the
// triggers file at path, so a one-shot trigger never fires again, even after
// a restart. The file is replaced atomically (a temporary file in the same
// folder renamed over it; a symlink is resolved and its target replaced).
// The trigger must still be an armed forge trigger: a file edited meanwhile
// so that index names another trigger is refused with an error.
func Disarm(path string, index int, name string, at time.Time, jobID string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	t, armed, err := readArmed(real, index, name)
	if err != nil || !armed {
		return err
	}
	for k := range t.Others {
		if t.Others[k].Index != index {
			continue
		}
		if t.Others[k].Raw, err = markDisarmed(t.Others[k].Raw, at, jobID); err != nil {
			return err
		}
	}
	out, err := t.MarshalJSON()
	if err != nil {
		return err
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, out, "", "  "); err != nil {
		return err
	}
	pretty.WriteByte('\n')
	return writeAtomic(real, pretty.Bytes())
}

// readArmed rereads the file and reports whether index is still the armed trigger name: it may have been edited.
func readArmed(path string, index int, name string) (t *Triggers, armed bool, err error) {
	data, err := readFile(path)
	if err != nil {
		return nil, false, err
	}
	if t, err = ParseTriggers(data); err != nil {
		return nil, false, err
	}
	fts, err := ForgeTriggers(t)
	if err != nil {
		return nil, false, err
	}
	i := slices.IndexFunc(fts, func(ft ForgeTrigger) bool { return ft.Index == index })
	if i < 0 || fts[i].Name != name {
		return nil, false, fmt.Errorf("cronsync: disarm %s: triggers[%d] is no longer that trigger", name, index)
	}
	return t, !fts[i].Disarmed, nil
}

// markDisarmed returns the trigger with on.disarmed = {at, jobId}, which keeps it from firing again.
func markDisarmed(raw json.RawMessage, at time.Time, jobID string) (json.RawMessage, error) {
	var trig map[string]json.RawMessage
	if err := json.Unmarshal(raw, &trig); err != nil {
		return nil, err
	}
	var on map[string]json.RawMessage
	if err := json.Unmarshal(trig["on"], &on); err != nil {
		return nil, err
	}
	mark, err := json.Marshal(struct {
		At    string `json:"at"`
		JobID string `json:"jobId"`
	}{at.UTC().Format(time.RFC3339), jobID})
	if err != nil {
		return nil, err
	}
	on["disarmed"] = mark
	if trig["on"], err = json.Marshal(on); err != nil {
		return nil, err
	}
	return json.Marshal(trig)
}

// writeAtomic replaces the triggers file, keeping its mode.
func writeAtomic(path string, data []byte) error {
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	return atomicfile.Write(path, data, mode, ".triggers-*.json")
}

// ForgeWatchConfig tunes WatchForge. The zero value is valid.
type ForgeWatchConfig struct {
	// Poll and Debounce as in WatchConfig (defaults 1 s and 500 ms).
	Poll, Debounce time.Duration
	// Logger receives triggers_reloaded and triggers_reload_invalid.
	Logger *slog.Logger
	// Host is this host's name, on every log line.
	Host string
}

// WatchForge polls the triggers file at path like a Watcher (stat by path,
// content hash, debounce) and calls apply with the forge triggers of every
// valid new content until ctx ends. A file that does not parse, or is
// missing, keeps the last good set (logged triggers_reload_invalid with kept
// true). The content at start is the baseline: the caller loaded it at boot.
// It runs in the caller's goroutine and starts none.
func WatchForge(ctx context.Context, path string, cfg ForgeWatchConfig, apply func([]ForgeTrigger)) error {
	if path == "" || apply == nil {
		return errors.New("cronsync: WatchForge needs a path and an apply function")
	}
	poll := cmpOr(cfg.Poll, DefaultPoll)
	debounce := cmpOr(cfg.Debounce, DefaultDebounce)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("host", cfg.Host)
	w := &Watcher{path: path}
	st := &watchState{}
	w.poll(st, time.Now())
	st.handled = st.cur.key
	pending, changedAt := false, time.Time{}
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		now := time.Now()
		if w.poll(st, now) {
			pending, changedAt = true, now
		}
		if !pending || now.Sub(changedAt) < debounce {
			continue
		}
		pending = false
		o := st.cur
		if o.key == st.handled {
			continue
		}
		st.handled = o.key
		if o.missing || o.err != nil {
			reason := "missing"
			if o.err != nil {
				reason = o.err.Error()
			}
			log.Warn("triggers_reload_invalid", "reason", reason, "kept", true)
			continue
		}
		fts, err := ParseForgeTriggers(o.data)
		if err != nil {
			log.Warn("triggers_reload_invalid", "reason", err.Error(), "kept", true)
			continue
		}
		apply(fts)
		log.Info("triggers_reloaded", "forgeTriggers", len(fts))
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
