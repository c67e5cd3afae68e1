package cicheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// baseSystem are the programs every machine CI runs on has before .ci/run
// installs anything: the Go toolchain (.ci/run refuses to start without
// it) and Debian's essential packages (bash, coreutils, libc-bin).
var baseSystem = []string{"go", "sh", "bash", "env", "true", "cat", "ldd", "getconf"}

// ciInstalls reads the programs .ci/run makes sure of: each line
// `command -v NAME >/dev/null || need+=(PACKAGE)`.
func ciInstalls(t *testing.T, root string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^command -v (\S+) >/dev/null \|\| need\+=\(([^)]+)\)`)
	out := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(data), -1) {
		out[m[1]] = m[2]
	}
	if len(out) == 0 {
		t.Fatal(".ci/run has no `command -v NAME >/dev/null || need+=(PACKAGE)` line: the pattern this check reads changed")
	}
	return out
}

// site is one place that executes or looks up a program: any one of
// alternatives will do (a list of candidates ranged over).
type site struct {
	pos          string
	alternatives []string
}

// TestCIInstallsEveryProgramTheTestsRun scans every Go file of the module
// for exec.Command, exec.CommandContext and exec.LookPath whose program is
// a string literal, a constant, or an element of a literal list ranged
// over, and fails for each program neither the base system nor .ci/run
// provides.
func TestCIInstallsEveryProgramTheTestsRun(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	installed := ciInstalls(t, root)
	sites := scan(t, root)
	if len(sites) < 10 {
		t.Fatalf("found only %d program sites; the scan is broken", len(sites))
	}
	for _, s := range sites {
		ok := false
		for _, alt := range s.alternatives {
			name := filepath.Base(alt)
			if slices.Contains(baseSystem, name) || installed[name] != "" {
				ok = true
			}
		}
		if !ok {
			t.Errorf("%s runs %s, which .ci/run does not install: add `command -v %s >/dev/null || need+=(<Debian package>)`",
				s.pos, strings.Join(s.alternatives, " or "), filepath.Base(s.alternatives[0]))
		}
	}
}

// The scan must see the programs this check exists for, so a change that
// hides them from it fails here rather than passing silently.
func TestScanFindsTheKnownPrograms(t *testing.T) {
	root, _ := filepath.Abs(filepath.Join("..", "..", ".."))
	seen := map[string]bool{}
	for _, s := range scan(t, root) {
		for _, a := range s.alternatives {
			seen[filepath.Base(a)] = true
		}
	}
	for _, want := range []string{"redis-server", "redis-sentinel", "valgrind", "chromium", "node", "npm", "git", "docker"} {
		if !seen[want] {
			t.Errorf("the scan did not find %s", want)
		}
	}
}

func scan(t *testing.T, root string) []site {
	t.Helper()
	var sites []site
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		sites = append(sites, fileSites(fset, f)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sites
}

// fileSites finds the program sites of one file.
func fileSites(fset *token.FileSet, f *ast.File) []site {
	consts := literalValues(f)
	ranged := rangedLists(f)
	var out []site
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "exec" {
			return true
		}
		arg := -1
		switch sel.Sel.Name {
		case "Command", "LookPath":
			arg = 0
		case "CommandContext":
			arg = 1
		}
		if arg < 0 || len(call.Args) <= arg {
			return true
		}
		if alts := programOf(call.Args[arg], consts, ranged); len(alts) > 0 {
			out = append(out, site{pos: fset.Position(call.Pos()).String(), alternatives: alts})
		}
		return true
	})
	return out
}

// programOf resolves a program argument: a literal, a constant or variable
// initialised with one, or a range variable (or its field) over a literal list.
func programOf(e ast.Expr, consts map[string]string, ranged map[string][]string) []string {
	switch v := e.(type) {
	case *ast.BasicLit:
		if s, err := strconv.Unquote(v.Value); err == nil && s != "" {
			return []string{s}
		}
	case *ast.Ident:
		if s, ok := consts[v.Name]; ok {
			return []string{s}
		}
		return ranged[v.Name]
	case *ast.SelectorExpr:
		if x, ok := v.X.(*ast.Ident); ok {
			return ranged[x.Name+"."+v.Sel.Name]
		}
	}
	return nil
}

// literalValues maps each name declared with one string literal value.
func literalValues(f *ast.File) map[string]string {
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok {
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						out[name.Name], _ = strconv.Unquote(lit.Value)
					}
				}
			}
		}
		return true
	})
	return out
}

// rangedLists maps a range variable over a literal list to the list's
// strings: `for _, p := range []string{...}` gives p; over a list of
// structs (inline or a package variable) gives p.field for each string field.
func rangedLists(f *ast.File) map[string][]string {
	lists := map[string]*ast.CompositeLit{}
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok {
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if cl, ok := vs.Values[i].(*ast.CompositeLit); ok {
						lists[name.Name] = cl
					}
				}
			}
		}
		return true
	})
	out := map[string][]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		rs, ok := n.(*ast.RangeStmt)
		if !ok || rs.Value == nil {
			return true
		}
		v, ok := rs.Value.(*ast.Ident)
		if !ok {
			return true
		}
		cl, _ := rs.X.(*ast.CompositeLit)
		if id, ok := rs.X.(*ast.Ident); ok {
			cl = lists[id.Name]
		}
		if cl == nil {
			return true
		}
		for _, el := range cl.Elts {
			switch e := el.(type) {
			case *ast.BasicLit:
				if s, err := strconv.Unquote(e.Value); err == nil {
					out[v.Name] = append(out[v.Name], s)
				}
			case *ast.CompositeLit:
				structFields(e, v.Name, out)
			}
		}
		return true
	})
	return out
}

// structFields adds each string field of a struct literal in a ranged list:
// keyed fields by their key, the first positional field as "name".
func structFields(e *ast.CompositeLit, v string, out map[string][]string) {
	for i, fe := range e.Elts {
		key, val := "", fe
		if kv, ok := fe.(*ast.KeyValueExpr); ok {
			if k, ok := kv.Key.(*ast.Ident); ok {
				key = k.Name
			}
			val = kv.Value
		} else if i == 0 {
			key = "name"
		}
		if lit, ok := val.(*ast.BasicLit); ok && lit.Kind == token.STRING && key != "" {
			s, _ := strconv.Unquote(lit.Value)
			out[v+"."+key] = append(out[v+"."+key], s)
		}
	}
}
