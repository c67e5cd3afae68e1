package workspace_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
)

// evil writes a program outside the workspace that, if the host ever runs
// it, appends to a marker file; it answers the program and the marker.
func evil(t *testing.T) (prog, marker string) {
	t.Helper()
	dir := t.TempDir()
	prog, marker = filepath.Join(dir, "evil.sh"), filepath.Join(dir, "marker")
	require.NoError(t, os.WriteFile(prog, []byte("#!/bin/sh\necho \"$0 $*\" >> '"+marker+"'\nexit 1\n"), 0o755))
	return prog, marker
}

// lazyFetchingGit is the host's git with the lazy fetch of a partial
// clone's missing objects switched back on, for it and the git programs it
// starts, as a git without the block of 2024's security releases has it.
func lazyFetchingGit(t *testing.T) string {
	t.Helper()
	real, err := exec.LookPath("git")
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "git")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\nGIT_NO_LAZY_FETCH=0 exec '"+real+"' \"$@\"\n"), 0o755))
	return p
}

// requireNotRun checks the host ran none of the job's programs.
func requireNotRun(t *testing.T, marker string) {
	t.Helper()
	data, err := os.ReadFile(marker)
	require.ErrorIs(t, err, os.ErrNotExist, "the host ran a program the job configured: %s", data)
}

// jobGit is the job's own git, in its own workspace, writing what it likes.
func jobGit(t *testing.T, b *bundle, args ...string) string {
	t.Helper()
	return forgetest.Git(t, b.dir, args...)
}

// requirePublished checks the pushed commit holds exactly the files given.
func requirePublished(t *testing.T, b *bundle, pub workspace.Published, files map[string]string) {
	t.Helper()
	require.NotEmpty(t, pub.PushedCommit)
	require.Equal(t, pub.PushedCommit, b.git.Head(t, repo, "pi/issue-5"))
	for name, body := range files {
		got := forgetest.Git(t, b.git.Dir(repo), "cat-file", "blob", pub.PushedCommit+":"+name)
		require.Equal(t, strings.TrimSpace(body), got, name)
	}
}

// objectFiles counts the files of every object store under dir.
func objectFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.Contains(filepath.ToSlash(p), "/objects/") {
			n++
		}
		return nil
	}))
	return n
}

func TestPublishRunsNothingTheJobConfigured(t *testing.T) {
	t.Parallel()

	t.Run("FsmonitorAndIncludeInJobConfig", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		prog, marker := evil(t)
		included := filepath.Join(t.TempDir(), "evil.config")
		require.NoError(t, os.WriteFile(included, []byte("[core]\n\tfsmonitor = "+prog+"\n\tsshCommand = "+prog+"\n"), 0o644))
		jobGit(t, b, "config", "core.fsmonitor", prog)
		jobGit(t, b, "config", "include.path", included)
		jobGit(t, b, "config", "core.untrackedCache", "true")
		jobGit(t, b, "config", "uploadpack.packObjectsHook", prog)
		jobGit(t, b, "config", "core.alternateRefsCommand", prog)
		b.write(t, "src/app.go", "package app\n\nfunc Fixed() {}\n")
		jobGit(t, b, "-c", "core.fsmonitor=", "commit", "-qam", "fix")

		pub, err := c.Publish(context.Background(), completed)
		require.NoError(t, err)
		requireNotRun(t, marker)
		requirePublished(t, b, pub, map[string]string{"src/app.go": "package app\n\nfunc Fixed() {}"})
	})

	t.Run("FiltersInJobConfig", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		prog, marker := evil(t)
		for _, kv := range [][2]string{
			{"filter.evil.clean", prog}, {"filter.evil.smudge", prog}, {"filter.evil.process", prog},
			{"filter.evil.required", "true"}, {"diff.evil.textconv", prog}, {"diff.external", prog},
			{"merge.evil.driver", prog}, {"core.attributesFile", filepath.Join(b.dir, ".evilattributes")},
		} {
			jobGit(t, b, "config", kv[0], kv[1])
		}
		b.write(t, ".evilattributes", "* filter=evil diff=evil merge=evil\n")
		b.write(t, "src/.gitattributes", "*.go filter=evil diff=evil\n")
		b.write(t, "src/app.go", "package app\n\nfunc Filtered() {}\n")

		pub, err := c.Publish(context.Background(), completed)
		require.NoError(t, err)
		requireNotRun(t, marker)
		requirePublished(t, b, pub, map[string]string{"src/app.go": "package app\n\nfunc Filtered() {}"})
	})

	t.Run("HooksInJobRepository", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		prog, marker := evil(t)
		hooks := filepath.Join(b.dir, ".git", "hooks")
		require.NoError(t, os.MkdirAll(hooks, 0o755))
		script, err := os.ReadFile(prog)
		require.NoError(t, err)
		for _, h := range []string{"pre-commit", "post-commit", "post-checkout", "post-index-change", "reference-transaction",
			"pre-push", "pre-receive", "update", "post-update", "push-to-checkout", "pre-auto-gc", "post-rewrite",
			"fsmonitor-watchman", "proc-receive", "sendemail-validate", "post-merge"} {
			require.NoError(t, os.WriteFile(filepath.Join(hooks, h), script, 0o755))
		}
		otherHooks := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(otherHooks, "reference-transaction"), script, 0o755))
		jobGit(t, b, "config", "core.hooksPath", otherHooks)
		b.write(t, "NOTES.md", "notes\n")

		pub, err := c.Publish(context.Background(), completed)
		require.NoError(t, err)
		requireNotRun(t, marker)
		requirePublished(t, b, pub, map[string]string{"NOTES.md": "notes"})
	})

	t.Run("PartialCloneWithPromisorOverSSHCommand", func(t *testing.T) {
		t.Parallel()
		// The host's git is one without git's own lazy-fetch block (older
		// than 2.39.4, 2.44.1 or 2.45.1): publish must not rely on it.
		b := setupWith(t, workspace.PublishPolicy{}, workspace.Limits{}, func(cfg *workspace.Config) {
			cfg.Git = lazyFetchingGit(t)
		})
		c := b.prepare(t)
		prog, marker := evil(t)
		b.write(t, "src/app.go", "package app\n\nfunc Lazy() {}\n")
		jobGit(t, b, "commit", "-qam", "lazy")
		// The job's repository claims to be a partial clone whose missing
		// objects come from a promisor over ssh, run by core.sshCommand.
		for _, kv := range [][2]string{
			{"core.repositoryformatversion", "1"}, {"extensions.partialClone", "evil"},
			{"remote.evil.url", "ssh://example.invalid/evil"}, {"remote.evil.promisor", "true"},
			{"remote.evil.uploadpack", prog}, {"remote.evil.receivepack", prog},
			{"core.sshCommand", prog}, {"ssh.variant", "ssh"}, {"protocol.allow", "always"},
			{"credential.helper", "!" + prog}, {"core.askPass", prog}, {"core.gitProxy", prog},
		} {
			jobGit(t, b, "config", kv[0], kv[1])
		}
		// The new blob is gone: reading it would fetch it lazily.
		blob := jobGit(t, b, "rev-parse", "HEAD:src/app.go")
		require.NoError(t, os.Remove(filepath.Join(b.dir, ".git", "objects", blob[:2], blob[2:])))

		pub, err := c.Publish(context.Background(), completed)
		requireNotRun(t, marker)
		if err != nil {
			requireRefused(t, b, err, jobs.ReasonHistoryRewritten)
			return
		}
		requirePublished(t, b, pub, map[string]string{"src/app.go": "package app\n\nfunc Lazy() {}"})
	})

	t.Run("AlternatesToHostRepositoryRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		// A repository on the host, beside the workspace, with a commit on
		// the base the job never had.
		host := t.TempDir()
		forgetest.Git(t, host, "clone", "-q", "--no-local", b.git.Dir(repo), ".")
		require.NoError(t, os.WriteFile(filepath.Join(host, "secret.txt"), []byte("host secret\n"), 0o644))
		forgetest.Git(t, host, "add", "secret.txt")
		forgetest.Git(t, host, "commit", "-qm", "host only")
		hostHead := forgetest.Git(t, host, "rev-parse", "HEAD")
		// The job borrows the host's objects and points its HEAD there.
		require.NoError(t, os.WriteFile(filepath.Join(b.dir, ".git", "objects", "info", "alternates"),
			[]byte(filepath.Join(host, ".git", "objects")+"\n"), 0o644))
		jobGit(t, b, "update-ref", "HEAD", hostHead)

		_, err := c.Publish(context.Background(), completed)
		requireRefused(t, b, err, jobs.ReasonHistoryRewritten)
	})

	t.Run("RepackedHistoryAndPackedRefsPublished", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		b.write(t, "src/app.go", "package app\n\nfunc Packed() {}\n")
		jobGit(t, b, "commit", "-qam", "packed")
		jobGit(t, b, "repack", "-a", "-d", "-q")
		jobGit(t, b, "pack-refs", "--all")
		pub, err := c.Publish(context.Background(), completed)
		require.NoError(t, err)
		requirePublished(t, b, pub, map[string]string{"src/app.go": "package app\n\nfunc Packed() {}"})
	})

	t.Run("GitFileToHostRepositoryRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		host := t.TempDir()
		forgetest.Git(t, host, "clone", "-q", "--no-local", b.git.Dir(repo), ".")
		require.NoError(t, os.RemoveAll(filepath.Join(b.dir, ".git")))
		require.NoError(t, os.WriteFile(filepath.Join(b.dir, ".git"), []byte("gitdir: "+filepath.Join(host, ".git")+"\n"), 0o644))
		b.write(t, "NOTES.md", "notes\n")

		_, err := c.Publish(context.Background(), completed)
		requireRefused(t, b, err, jobs.ReasonHistoryRewritten)
	})
}

func TestPublishBoundsTheWorkspaceBeforeCopying(t *testing.T) {
	t.Parallel()

	t.Run("FiftyThousandFiles", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		for i := range 50 {
			d := filepath.Join(b.dir, "gen", string(rune('a'+i%26))+string(rune('a'+i/26)))
			require.NoError(t, os.MkdirAll(d, 0o755))
			for j := range 1000 {
				require.NoError(t, os.WriteFile(filepath.Join(d, "f"+strconv.Itoa(j)), []byte(strconv.Itoa(i*1000+j)), 0o644))
			}
		}
		before := objectFiles(t, b.state)
		start := time.Now()
		_, err := c.Publish(context.Background(), completed)
		t.Logf("50,000 files: refused in %s, %d object files written", time.Since(start), objectFiles(t, b.state)-before)
		requireRefused(t, b, err, jobs.ReasonTooManyFiles)
		require.Equal(t, before, objectFiles(t, b.state), "refused before anything was copied")
	})

	t.Run("SparseGiB", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		f, err := os.Create(filepath.Join(b.dir, "huge.bin"))
		require.NoError(t, err)
		require.NoError(t, f.Truncate(1<<30))
		require.NoError(t, f.Close())
		before := objectFiles(t, b.state)
		start := time.Now()
		_, err = c.Publish(context.Background(), completed)
		t.Logf("1 GiB sparse file: refused in %s, %d object files written", time.Since(start), objectFiles(t, b.state)-before)
		requireRefused(t, b, err, jobs.ReasonTooLarge)
		require.Equal(t, before, objectFiles(t, b.state), "refused before anything was copied")
	})

	t.Run("SparseGiBInsideGitDir", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		c := b.prepare(t)
		f, err := os.Create(filepath.Join(b.dir, ".git", "objects", "pack", "pack-0000000000000000000000000000000000000000.pack"))
		require.NoError(t, err)
		require.NoError(t, f.Truncate(1<<30))
		require.NoError(t, f.Close())
		b.write(t, "NOTES.md", "notes\n")
		_, err = c.Publish(context.Background(), completed)
		requireRefused(t, b, err, jobs.ReasonTooLarge)
	})

	t.Run("GrowthWithinTheLimitsPublished", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{MaxFiles: 20})
		c := b.prepare(t)
		// Twenty files, committed in five commits: the workspace and its
		// .git grow by more than twenty entries, the change is twenty files.
		files := map[string]string{}
		for i := range 20 {
			name := "docs/part" + strconv.Itoa(i/4) + "/n" + strconv.Itoa(i) + ".md"
			b.write(t, name, "note "+strconv.Itoa(i)+"\n")
			files[name] = "note " + strconv.Itoa(i)
			if i%4 == 3 {
				jobGit(t, b, "add", "-A")
				jobGit(t, b, "commit", "-qm", "part "+strconv.Itoa(i/4))
			}
		}
		pub, err := c.Publish(context.Background(), completed)
		require.NoError(t, err)
		requirePublished(t, b, pub, files)
	})
}
