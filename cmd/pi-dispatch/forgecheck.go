package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/stack"
)

// forgeCredentialName is the doctor check of each forge's credential.
const forgeCredentialName = "forge-credential"

// forgeGitName is the doctor check of the host's git, which forge jobs run.
const forgeGitName = "forge-git"

// checkForgeCredentials calls each forge creds holds a credential for, with
// it, and answers what the forge says it lacks (docs/forges.md, "Permissions
// each forge needs"), for the repositories the forge triggers of the
// triggers file at triggersFile name (none readable: the credential alone).
// Each forge is bounded by workspace.CheckTimeout, the forges asked at once.
// No forge configured: nothing.
func checkForgeCredentials(ctx context.Context, creds config.ForgeCredentials, triggersFile string) ([]workspace.CredentialCheck, error) {
	forges, err := stack.ForgesFromCredentials(creds)
	if err != nil || len(forges) == 0 {
		return nil, err
	}
	return workspace.CheckForges(ctx, forges, forgeTriggerRepos(triggersFile)), nil
}

// forgeTriggerRepos lists the repositories of the forge triggers of the
// triggers file at path, by forge. A file that is absent or does not parse
// lists none: the triggers check says why.
func forgeTriggerRepos(path string) map[jobs.Forge][]string {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	fts, err := cronsync.ParseForgeTriggers(data)
	if err != nil {
		return nil
	}
	out := map[jobs.Forge][]string{}
	for _, ft := range fts {
		out[ft.Forge] = append(out[ft.Forge], ft.Repos...)
	}
	return out
}

// credentialDetail is one finding as a line, its forge first.
func credentialDetail(c workspace.CredentialCheck) string {
	return fmt.Sprintf("%s credential: %s", c.Forge, c.Detail)
}

// credentialChecks are doctor's lines of the findings, forge by forge: one
// ✓ for the findings that are OK, then one line per other finding (✗ a
// missing scope, permission or role, or a refused credential; ⚠ what could
// not be verified).
func credentialChecks(found []workspace.CredentialCheck) []operator.Check {
	var forges []jobs.Forge
	ok := map[jobs.Forge][]string{}
	other := map[jobs.Forge][]operator.Check{}
	for _, c := range found {
		if !slices.Contains(forges, c.Forge) {
			forges = append(forges, c.Forge)
		}
		switch {
		case c.OK:
			ok[c.Forge] = append(ok[c.Forge], c.Detail)
		case c.Unverified:
			other[c.Forge] = append(other[c.Forge], operator.Check{Status: operator.CheckWarn, Name: forgeCredentialName, Detail: credentialDetail(c), Fix: c.Fix})
		default:
			other[c.Forge] = append(other[c.Forge], operator.Check{Status: operator.CheckFail, Name: forgeCredentialName, Detail: credentialDetail(c), Fix: c.Fix})
		}
	}
	var out []operator.Check
	for _, f := range forges {
		if len(ok[f]) > 0 {
			out = append(out, operator.Check{Status: operator.CheckOK, Name: forgeCredentialName,
				Detail: fmt.Sprintf("%s credential: %s", f, strings.Join(ok[f], "; "))})
		}
		out = append(out, other[f]...)
	}
	return out
}

// doctorForgeChecks are doctor's forge-credential lines for the
// environment getenv reads; none when no forge credential is set.
func doctorForgeChecks(ctx context.Context, getenv func(string) string, triggersFile string) []operator.Check {
	creds, err := config.LoadForgeCredentials(getenv)
	var found []workspace.CredentialCheck
	if err == nil {
		found, err = checkForgeCredentials(ctx, creds, triggersFile)
	}
	if err != nil {
		return []operator.Check{{Status: operator.CheckFail, Name: forgeCredentialName,
			Detail: "forge credentials invalid: " + err.Error(),
			Fix:    "fix it in .env (docs/forges.md); the worker refuses to boot with it (exit 2)"}}
	}
	out := credentialChecks(found)
	if creds.GitHub != nil || creds.GitLab != nil || creds.Forgejo != nil {
		out = append(out, forgeGitCheck(ctx, "git"))
	}
	return out
}

// forgeGitCheck is doctor's line of the git a worker holding forge
// credentials runs (program, "": "git"): ✓ with its version, or ✗ with the
// worker's own refusal (stack.CheckHostGit), which stops its boot.
func forgeGitCheck(ctx context.Context, program string) operator.Check {
	v, err := stack.CheckHostGit(ctx, program)
	if err != nil {
		return operator.Check{Status: operator.CheckFail, Name: forgeGitName, Detail: err.Error(),
			Fix: "the worker refuses to boot with it (exit 2) while this host holds forge credentials"}
	}
	return operator.Check{Status: operator.CheckOK, Name: forgeGitName,
		Detail: fmt.Sprintf("git %s (forge jobs need %s or later)", v, workspace.MinGitVersion)}
}

// printCredentialChecks writes receive --check's lines of the findings: OK
// ones on out, the others on errOut (a warning when they could not be
// verified). It reports whether any found something missing.
func printCredentialChecks(out, errOut io.Writer, prefix string, found []workspace.CredentialCheck) bool {
	failed := false
	for _, c := range found {
		switch {
		case c.OK:
			fmt.Fprintf(out, "ok: %s\n", credentialDetail(c))
		case c.Unverified:
			fmt.Fprintf(errOut, "%s: warning: %s\n", prefix, credentialDetail(c))
			if c.Fix != "" {
				fmt.Fprintf(errOut, "    fix: %s\n", c.Fix)
			}
		default:
			failed = true
			fmt.Fprintf(errOut, "%s: %s\n", prefix, credentialDetail(c))
			if c.Fix != "" {
				fmt.Fprintf(errOut, "    fix: %s\n", c.Fix)
			}
		}
	}
	return failed
}
