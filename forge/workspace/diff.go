package workspace

import (
	"bufio"
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/pidispatch/pidispatch/forge/token"
)

// diffDeepen are the depths the host-only copy is deepened by, one after
// the other, until the pull request's base and head meet; past the last,
// no line is in the diff.
var diffDeepen = []int{64, 512, 4096}

// diffLines are the new-side lines of each changed hunk of a pull
// request's diff, by path: where an inline comment may go.
type diffLines map[string][][2]int

// has reports whether line of path is a new-side line of a hunk.
func (d diffLines) has(path string, line int) bool {
	for _, r := range d[path] {
		if line >= r[0] && line <= r[1] {
			return true
		}
	}
	return false
}

// pullDiff is the diff of the pull request the job is on, as git computes
// it between the pull request's base (the merge base of its base branch
// and head) and head, the head the job ends with. A diff that cannot be
// computed holds no line: every inline comment is then refused.
func (c *Checkout) pullDiff(ctx context.Context, head string) diffLines {
	d, err := c.computeDiff(ctx, head)
	if err != nil {
		c.log.Warn("forge_pull_diff_unknown", "err", err)
		return diffLines{}
	}
	return d
}

func (c *Checkout) computeDiff(ctx context.Context, head string) (diffLines, error) {
	if c.pull.Base == "" {
		return nil, errors.New("no pull request base")
	}
	// The base branch, and the head when the host does not hold it (the
	// head of a pull request the job did not push to), fetched into the
	// host-only copy and deepened until they meet.
	refspecs := []string{"+refs/heads/" + c.pull.Base + ":refs/pi/pull-base"}
	if head == "" {
		refspecs = append(refspecs, "+"+c.pull.Ref+":refs/pi/pull-head")
		head = "refs/pi/pull-head"
	}
	fetch := func(depth string) error {
		return c.call(ctx, func(tok token.Token) error {
			args := append([]string{"fetch", "--quiet", "--no-tags", depth, c.repo.CloneURL}, refspecs...)
			_, err := c.m.git(c.state).auth(c.repo.CloneURL, c.forge.API.GitUser(), tok).run(ctx, args...)
			return err
		})
	}
	if err := fetch("--depth=1"); err != nil {
		return nil, err
	}
	base := ""
	for i := 0; ; i++ {
		out, err := c.m.git(c.state).run(ctx, "merge-base", "refs/pi/pull-base", head)
		if err == nil {
			base = strings.TrimSpace(out)
			break
		}
		if i == len(diffDeepen) {
			return nil, errors.New("the pull request's base and head do not meet")
		}
		if err := fetch("--deepen=" + strconv.Itoa(diffDeepen[i])); err != nil {
			return nil, err
		}
	}
	out, err := c.m.git(c.state).run(ctx, "diff", "--no-color", "--no-ext-diff", "--no-textconv", "-U3", "-M",
		"--src-prefix=a/", "--dst-prefix=b/", base, head)
	if err != nil {
		return nil, err
	}
	return parseDiff(out), nil
}

// parseDiff reads the new-side line ranges of each hunk of a unified diff.
func parseDiff(out string) diffLines {
	d := diffLines{}
	path := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "diff --git "):
			path = ""
		case strings.HasPrefix(line, "+++ "):
			path = diffPath(strings.TrimPrefix(line, "+++ "))
		case strings.HasPrefix(line, "@@ ") && path != "":
			if start, n, ok := hunkNewRange(line); ok && n > 0 {
				d[path] = append(d[path], [2]int{start, start + n - 1})
			}
		}
	}
	return d
}

// diffPath is the path of a +++ line ("" for /dev/null or one that does not
// read), unquoted as git quotes it.
func diffPath(p string) string {
	if strings.HasPrefix(p, `"`) {
		u, err := strconv.Unquote(p)
		if err != nil {
			return ""
		}
		p = u
	}
	p, ok := strings.CutPrefix(p, "b/")
	if !ok {
		return ""
	}
	return p
}

// hunkNewRange reads "@@ -a,b +c,d @@": the new side's first line c and
// its count d (1 when omitted).
func hunkNewRange(line string) (int, int, bool) {
	fields := strings.Fields(line)
	if len(fields) < 3 || !strings.HasPrefix(fields[2], "+") {
		return 0, 0, false
	}
	spec := strings.TrimPrefix(fields[2], "+")
	startS, countS, hasCount := strings.Cut(spec, ",")
	start, err := strconv.Atoi(startS)
	if err != nil {
		return 0, 0, false
	}
	count := 1
	if hasCount {
		if count, err = strconv.Atoi(countS); err != nil {
			return 0, 0, false
		}
	}
	return start, count, true
}
