package jobs

import (
	"github.com/pidispatch/pidispatch/internal/check"
)

// Forge names the kind of forge a forge job's repository lives on.
type Forge string

// Forges a job can target. The names are the original's run.kind values.
const (
	ForgeGitHub  Forge = "github"
	ForgeGitLab  Forge = "gitlab"
	ForgeForgejo Forge = "forgejo" // Forgejo and Gitea speak one API
)

// Limits of a forge job's fields.
const (
	MaxDeliveryIDBytes = 128
	MaxForgeNumber     = 1 << 30
	MaxReplicas        = 3
	// MaxRepoID is the largest integer a JSON number holds exactly.
	MaxRepoID = 1<<53 - 1
)

// ForgeEvent is what a forge delivery adds to a job: which forge, which issue or pull
// request, which delivery and which trigger. It carries no permission: what a job may
// publish (CI files, sizes) is decided by the host that runs it, from its own
// triggers.json entry named by Trigger, never from the job data.
type ForgeEvent struct {
	// Forge is the forge the repository lives on.
	Forge Forge `json:"forge,omitempty"`
	// RepoID is the forge's numeric id of the repository (GitLab: the
	// project id) as the delivery named it; 0 when the job was made without
	// one. A name can be renamed, transferred and taken again between the
	// delivery and the run; the id cannot, so the host that runs the job
	// refuses a repository the forge answers under another id.
	RepoID int64 `json:"repoId,omitempty"`
	// Number is the issue, pull request or merge request the event is about (0: none).
	Number int `json:"number,omitempty"`
	// PullRequest says Number is a pull (merge) request: the workspace is its head.
	PullRequest bool `json:"pullRequest,omitempty"`
	// DeliveryID is the forge's delivery id (or the poller's event id).
	DeliveryID string `json:"deliveryId,omitempty"`
	// Trigger names the triggers.json entry that matched the event.
	Trigger string `json:"trigger,omitempty"`
	// Instructions are the trigger's extra instructions to the agent.
	Instructions string `json:"instructions,omitempty"`
	// CommentID and ReviewID name the comment or review that triggered the
	// job, Label the label whose adding did, and ActorID the forge's numeric
	// id of who acted: the host reads each from the forge itself (never their
	// text from the job data) when it builds the job's event.
	CommentID int64  `json:"commentId,omitempty"`
	ReviewID  int64  `json:"reviewId,omitempty"`
	Label     string `json:"label,omitempty"`
	ActorID   int64  `json:"actorId,omitempty"`
	// Replica and Replicas number the copies of one event a trigger asked for
	// (replicas 2..3); both 0 for a single job.
	Replica  int `json:"replica,omitempty"`
	Replicas int `json:"replicas,omitempty"`
}

// validateForge checks the forge fields: present only on a job that targets a
// repository, and each within its bounds.
func (j Job) validateForge() error {
	f := j.ForgeEvent
	if f == (ForgeEvent{}) {
		return nil
	}
	if j.Repo == "" {
		return check.Field("forge", "only a job that targets a repository has forge fields")
	}
	switch f.Forge {
	case ForgeGitHub, ForgeGitLab, ForgeForgejo:
	case "":
		return check.Field("forge", "required with forge fields (github, gitlab or forgejo)")
	default:
		return check.Field("forge", "unknown forge %s (want github, gitlab or forgejo)", check.Quote(string(f.Forge)))
	}
	if f.RepoID < 0 || f.RepoID > MaxRepoID {
		return check.Field("repoId", "must be between 0 and %d", int64(MaxRepoID))
	}
	if f.Number < 0 || f.Number > MaxForgeNumber {
		return check.Field("number", "must be between 0 and %d", MaxForgeNumber)
	}
	if f.PullRequest && f.Number == 0 {
		return check.Field("pullRequest", "a pull request needs its number")
	}
	if f.DeliveryID != "" && !validDeliveryID(f.DeliveryID) {
		return check.Field("deliveryId", "must be 1-%d bytes of [A-Za-z0-9._:-]", MaxDeliveryIDBytes)
	}
	if f.Trigger != "" && !check.Name(f.Trigger) {
		return check.Field("trigger", "must match %s (at most %d bytes)", check.NameSyntax, check.MaxNameLen)
	}
	if rule := check.Text(f.Instructions, MaxTaskBytes); rule != "" {
		return check.Field("instructions", "%s", rule)
	}
	if f.CommentID < 0 || f.ReviewID < 0 || f.ActorID < 0 {
		return check.Field("commentId", "ids must not be negative")
	}
	if f.Label != "" && (len(f.Label) > MaxEventNameBytes || ClipName(f.Label) != f.Label) {
		return check.Field("label", "must be at most %d bytes of one line of text", MaxEventNameBytes)
	}
	if f.Replicas != 0 || f.Replica != 0 {
		if f.Replicas < 2 || f.Replicas > MaxReplicas {
			return check.Field("replicas", "must be 2 to %d when set", MaxReplicas)
		}
		if f.Replica < 1 || f.Replica > f.Replicas {
			return check.Field("replica", "must be 1 to replicas (%d)", f.Replicas)
		}
	}
	return nil
}

func validDeliveryID(s string) bool {
	if len(s) == 0 || len(s) > MaxDeliveryIDBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}
