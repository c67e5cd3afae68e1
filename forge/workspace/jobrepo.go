package workspace

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/pidispatch/pidispatch/jobs"
)

// How publish reads the job's repository.
//
// The job owns its workspace's .git: its config (with includes, hooks,
// core.fsmonitor, filters, core.sshCommand and every other command it can
// name), its objects/info/alternates, its promisor remotes, its gitfile.
// Pointing a host git at it and switching settings off one by one
// (safe.directory=*, -c overrides) leaves the host one forgotten setting,
// or one git version, away from running the job's program. So no host git
// ever opens the job's repository: publish reads HEAD and its refs itself,
// as bytes, copies the object files it names (loose objects and packs, by
// their names only, regular files only, never through a link out of the
// workspace) into a repository the host made, and asks git about that one.
// The worktree is read with GIT_DIR at the host-only repository: git then
// reads the job's files as data and the host's configuration alone.

// Workspace growth allowed on top of the publish limits: what git itself
// writes while the job commits (trees, commits, logs, a rewritten index).
const (
	workspaceSlackFiles = 1000
	workspaceSlackBytes = 16 << 20
)

// footprint is what a workspace holds: its entries (files, folders, links)
// and the bytes of its regular files, and the packs its .git held when the
// host made it.
type footprint struct {
	files, bytes int64
	packs        map[string]bool
}

// errOverBound stops a walk that went past its bound.
type errOverBound struct {
	reason jobs.Reason
	path   string
}

func (e *errOverBound) Error() string { return string(e.reason) + " at " + e.path }

// measure walks the workspace dir, never following a link, and stops as
// soon as it holds more than maxFiles entries or maxBytes bytes (a
// *RefusalError), or a .git below its root (a gitfile or a nested
// repository would have git read wherever it points).
func measure(dir string, maxFiles, maxBytes int64) (footprint, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return footprint{}, err
	}
	defer root.Close()
	fp := footprint{packs: map[string]bool{}}
	todo := []string{"."}
	for len(todo) > 0 {
		rel := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		sub, err := walkDir(root, rel, &fp, maxFiles, maxBytes)
		var over *errOverBound
		if errors.As(err, &over) {
			return fp, &RefusalError{Reason: over.reason, Path: over.path}
		}
		if err != nil {
			return fp, err
		}
		todo = append(todo, sub...)
	}
	return fp, nil
}

// walkBatch is how many entries of one folder are read at a time, so a
// folder of millions of names is not read whole before the bound stops it.
const walkBatch = 256

// walkDir counts the entries of the folder rel and answers its subfolders.
func walkDir(root *os.Root, rel string, fp *footprint, maxFiles, maxBytes int64) ([]string, error) {
	f, err := root.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("workspace folder %s changed while read", rel)
	}
	var sub []string
	for {
		ents, err := f.ReadDir(walkBatch)
		for _, e := range ents {
			p := path.Join(rel, e.Name())
			if strings.EqualFold(e.Name(), ".git") && rel != "." {
				return nil, &RefusalError{Reason: jobs.ReasonUnsafePath, Path: p}
			}
			if fp.files++; fp.files > maxFiles {
				return nil, &errOverBound{reason: jobs.ReasonTooManyFiles, path: p}
			}
			switch t := e.Type(); {
			case t.IsDir():
				sub = append(sub, p)
			case t.IsRegular():
				info, err := e.Info()
				if err != nil {
					return nil, err
				}
				if fp.bytes += info.Size(); fp.bytes > maxBytes {
					return nil, &errOverBound{reason: jobs.ReasonTooLarge, path: p}
				}
				if rel == ".git/objects/pack" && strings.HasSuffix(e.Name(), ".pack") {
					fp.packs[e.Name()] = true
				}
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(ents) == 0) {
			return sub, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// measureFresh records the workspace as the host made it, before the job.
func measureFresh(dir string) (footprint, error) {
	return measure(dir, math.MaxInt64, math.MaxInt64)
}

// checkGrowth refuses a workspace that grew past what the publish limits
// allow, before anything of it is copied or staged: the job's changes
// (twice: in its files and in its own commits) and git's own slack.
func (c *Checkout) checkGrowth() error {
	l := c.m.cfg.Limits
	maxFiles := c.fresh.files + 2*int64(l.MaxFiles) + workspaceSlackFiles
	maxBytes := c.fresh.bytes + 2*l.MaxBytes + workspaceSlackBytes
	_, err := measure(c.dir, maxFiles, maxBytes)
	var refusal *RefusalError
	if errors.As(err, &refusal) {
		c.log.Warn("forge_workspace_over_bound", "reason", refusal.Reason, "path", refusal.Path,
			"maxFiles", maxFiles, "maxBytes", maxBytes)
	}
	return err
}

// errNoHistory: the job's repository has no HEAD the host can read.
var errNoHistory = errors.New("the job's repository has no readable HEAD")

var (
	hexID      = regexp.MustCompile(`^[0-9a-f]{40}$`)
	looseDir   = regexp.MustCompile(`^[0-9a-f]{2}$`)
	looseFile  = regexp.MustCompile(`^[0-9a-f]{38}$`)
	packFile   = regexp.MustCompile(`^pack-[0-9a-f]{40}\.pack$`)
	badRefChar = regexp.MustCompile(`[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|/\.|\.lock(/|$)|/$`)
)

// maxRefFile bounds HEAD and a loose ref; maxRefDepth the symbolic refs followed.
const (
	maxRefFile  = 4096
	maxRefDepth = 5
)

// jobHead resolves the job's HEAD to a commit id by reading HEAD, its loose
// ref or packed-refs as data. A .git that is not a folder (a gitfile
// pointing elsewhere), a link, an odd ref name or a ref store the host
// does not read (reftable) is errNoHistory.
func jobHead(root *os.Root) (string, error) {
	if st, err := root.Lstat(".git"); err != nil || !st.IsDir() {
		return "", fmt.Errorf("%w: .git is not a folder", errNoHistory)
	}
	name := "HEAD"
	for range maxRefDepth {
		data, err := readSmall(root, ".git/"+name)
		if errors.Is(err, fs.ErrNotExist) && name != "HEAD" {
			return packedRef(root, name)
		}
		if err != nil {
			return "", fmt.Errorf("%w: %s: %w", errNoHistory, name, err)
		}
		v := strings.TrimSpace(string(data))
		if hexID.MatchString(v) {
			return v, nil
		}
		target, ok := strings.CutPrefix(v, "ref: ")
		if !ok || !strings.HasPrefix(target, "refs/") || badRefChar.MatchString(target) {
			return "", fmt.Errorf("%w: %s holds no commit id nor ref", errNoHistory, name)
		}
		name = target
	}
	return "", fmt.Errorf("%w: more than %d symbolic refs", errNoHistory, maxRefDepth)
}

// readSmall reads a regular file of at most maxRefFile bytes under root,
// never through a link.
func readSmall(root *os.Root, name string) ([]byte, error) {
	st, err := root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > maxRefFile {
		return nil, errors.New("not a small regular file")
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxRefFile))
}

// packedRef looks name up in the job's packed-refs.
func packedRef(root *os.Root, name string) (string, error) {
	st, err := root.Lstat(".git/packed-refs")
	if err != nil || !st.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s is not a ref", errNoHistory, name)
	}
	f, err := root.Open(".git/packed-refs")
	if err != nil {
		return "", fmt.Errorf("%w: %w", errNoHistory, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), maxRefFile)
	for sc.Scan() {
		id, ref, ok := strings.Cut(sc.Text(), " ")
		if ok && ref == name && hexID.MatchString(id) {
			return id, nil
		}
	}
	return "", fmt.Errorf("%w: %s is not a ref", errNoHistory, name)
}

// quarantine makes a host-owned repository in the host-only folder holding
// the object files of the job's repository, its base objects borrowed from
// the host-only repository (an alternate the host wrote, and its shallow
// list), and answers its folder. Only loose objects and packs are copied,
// by their names, from regular files; a pack is indexed by git's
// index-pack, the reader git uses for a pack from an untrusted peer; the
// packs of the fresh workspace are the host's own and are not copied.
func (c *Checkout) quarantine(ctx context.Context, root *os.Root) (string, error) {
	q := filepath.Join(c.state, "job.git")
	if err := os.RemoveAll(q); err != nil {
		return "", err
	}
	if _, err := c.m.git(c.state).run(ctx, "init", "--quiet", "--bare", "--template=", q); err != nil {
		return "", err
	}
	alt := filepath.Join(c.state, "objects") + "\n"
	if err := os.MkdirAll(filepath.Join(q, "objects", "info"), 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(q, "objects", "info", "alternates"), []byte(alt), 0o600); err != nil {
		return "", err
	}
	if shallow, err := os.ReadFile(filepath.Join(c.state, "shallow")); err == nil {
		if err := os.WriteFile(filepath.Join(q, "shallow"), shallow, 0o600); err != nil {
			return "", err
		}
	}
	dirs, err := readDirNames(root, ".git/objects")
	if err != nil {
		return "", fmt.Errorf("%w: objects: %w", errNoHistory, err)
	}
	var packs []string
	for _, d := range dirs {
		switch {
		case looseDir.MatchString(d):
			names, err := readDirNames(root, ".git/objects/"+d)
			if err != nil {
				return "", err
			}
			for _, n := range names {
				if looseFile.MatchString(n) {
					if err := copyRegular(root, ".git/objects/"+d+"/"+n, filepath.Join(q, "objects", d, n)); err != nil {
						return "", err
					}
				}
			}
		case d == "pack":
			names, err := readDirNames(root, ".git/objects/pack")
			if err != nil {
				return "", err
			}
			for _, n := range names {
				if packFile.MatchString(n) && !c.fresh.packs[n] {
					dst := filepath.Join(q, "objects", "pack", n)
					if err := copyRegular(root, ".git/objects/pack/"+n, dst); err != nil {
						return "", err
					}
					packs = append(packs, dst)
				}
			}
		}
	}
	for _, p := range packs {
		if _, err := c.m.gitDir(q).run(ctx, "index-pack", p); err != nil {
			return "", fmt.Errorf("%w: a pack of the job's: %w", errNoHistory, err)
		}
	}
	return q, nil
}

// readDirNames answers the names in the folder name under root ("" when it
// is a link or not a folder).
func readDirNames(root *os.Root, name string) ([]string, error) {
	st, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil || !st.IsDir() {
		return nil, err
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// copyRegular copies the regular file name under root to dst; a link or
// anything else is skipped.
func copyRegular(root *os.Root, name, dst string) error {
	st, err := root.Lstat(name)
	if err != nil || !st.Mode().IsRegular() {
		return err
	}
	src, err := root.Open(name)
	if err != nil {
		return err
	}
	defer src.Close()
	if st, err := src.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("%s changed while read", name)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o400)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, src); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// checkHistory refuses a job whose HEAD does not descend from the base,
// reading the job's repository as data (see the top of this file).
func (c *Checkout) checkHistory(ctx context.Context) error {
	root, err := os.OpenRoot(c.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	head, err := jobHead(root)
	if err == nil {
		var q string
		if q, err = c.quarantine(ctx, root); err == nil {
			defer os.RemoveAll(q)
			_, err = c.m.gitDir(q).run(ctx, "merge-base", "--is-ancestor", c.base, head)
		}
	}
	if err != nil {
		c.log.Warn("forge_job_history_unreadable", "err", err)
		return &RefusalError{Reason: jobs.ReasonHistoryRewritten}
	}
	return nil
}
