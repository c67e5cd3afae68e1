package config_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/moby/client"
)

// The documented-variables rule (docs/configuration.md): every environment
// variable read anywhere in the module is documented. Configuration goes in
// both docs/configuration.md and .env.example; what is not configuration (the
// process environment, the Docker client's, test switches, the test job's)
// goes in docs/configuration.md. The reads are found in the source itself, so
// a new os.Getenv("X") without its documentation fails here, naming the line.

// notConfiguration holds variables that are read but are not settings an
// operator puts in a deployment's .env.
var notConfiguration = map[string]bool{
	"TZ": true, "TMPDIR": true, "HOME": true, "PATH": true,
	"VALKEY_TEST_URL": true,
}

// notConfigurationPrefixes are families of such variables: the Docker
// client's, the test switches, the test job program's and the agent
// entrypoint's (read inside their containers).
var notConfigurationPrefixes = []string{"DOCKER_", "PIDISPATCH_", "JOB_", "PI_AGENT_"}

// readByDependencies are variables our code never names but the libraries it
// calls read: client.FromEnv, which every Docker client here is built with.
var readByDependencies = []string{
	client.EnvOverrideHost, client.EnvOverrideAPIVersion, client.EnvOverrideCertPath, client.EnvTLSVerify,
}

// dynamicReads are reads whose variable name is data, by design; each is
// keyed "path:expression".
var dynamicReads = map[string]string{
	// JOB_CHECK_ENV=NAME asks the test job whether NAME is set; it never prints the value.
	"internal/image/jobimage/jobprog/main.go:name": "JOB_CHECK_ENV names the variable",
	// The entrypoint asks whether a provider's key variable is set (providerKeys).
	"agent/entrypoint/agent.go:k": "providerKeys names each provider's key variable",
}

func isConfiguration(name string) bool {
	if notConfiguration[name] {
		return false
	}
	for _, p := range notConfigurationPrefixes {
		if strings.HasPrefix(name, p) {
			return false
		}
	}
	return true
}

func TestEnvDoc_EveryVariableReadIsDocumented(t *testing.T) {
	t.Parallel()
	root, modPath := moduleRoot(t)
	files := moduleSources(t, root)
	reads, problems := scanEnvReads(files, modPath)
	for _, p := range problems {
		if _, ok := dynamicReads[p.key]; !ok {
			t.Errorf("%s: reads an environment variable whose name cannot be told from the source (%s); "+
				"use a string literal or constant, or list it in dynamicReads with the reason", p.pos, p.key)
		}
	}
	// The scanner must see the reads we know of, or it proves nothing.
	for _, known := range []string{"VALKEY_URL", "PI_CONCURRENCY", "PI_WAIT_MAX_MS", "TZ", "PATH", "HOME", "VALKEY_TEST_URL", "JOB_WRITE_FILE"} {
		if _, ok := reads[known]; !ok {
			t.Errorf("the scan found no read of %s: the scanner is blind to a pattern the code uses", known)
		}
	}
	for _, name := range readByDependencies {
		reads[name] = append(reads[name], "github.com/moby/moby/client (client.FromEnv)")
	}

	confDoc := readDoc(t, filepath.Join(root, "docs", "configuration.md"))
	envExample := readDoc(t, filepath.Join(root, ".env.example"))
	names := make([]string, 0, len(reads))
	for name := range reads {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		where := strings.Join(reads[name], ", ")
		if !mentions(confDoc, name) {
			t.Errorf("%s is read at %s but not documented in docs/configuration.md", name, where)
		}
		if isConfiguration(name) && !mentions(envExample, name) {
			t.Errorf("%s is read at %s but not listed in .env.example (or, if it is not configuration, in notConfiguration)", name, where)
		}
	}
}

// TestEnvDoc_ScannerFindsEachPattern holds the scanner to every way the code
// reads a variable, on a fixture, so the real scan cannot pass by being blind.
func TestEnvDoc_ScannerFindsEachPattern(t *testing.T) {
	t.Parallel()
	files := map[string][]byte{
		"a/a.go": []byte(`package a

import (
	"os"
	"example.com/m/b"
)

const envName = "A_CONST"

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" { return v }
	return def
}

func load(getenv func(string) string) {
	get := func(name string) string { return getenv(name) }
	integer := func(name string, dst *int) { _ = get(name) }
	var n int
	integer("A_CLOSURE", &n)
	_ = getenv("A_PARAM")
	_, _ = os.LookupEnv(envName)
	_ = os.Getenv(b.Name)
	_ = envOr("A_DERIVED", "x")
	_, _, _ = envFileValue(".env", "A_FILE")
	dynamic := getenv("A_PARAM")
	_ = os.Getenv(dynamic)
	_ = os.Getenv(strings.ToUpper("x"))
	os.Setenv("NOT_A_READ", "1")
	_ = fmt.Sprintf("NOT_AN_ENV_CALL")
}

func envFileValue(path, key string) (string, bool, error) { return "", false, nil }
`),
		"b/b.go": []byte(`package b

// Name is read through a selector from package a.
const Name = "B_SELECTOR"
`),
	}
	reads, problems := scanEnvReads(files, "example.com/m")
	var got []string
	for name := range reads {
		got = append(got, name)
	}
	slices.Sort(got)
	want := []string{"A_CLOSURE", "A_CONST", "A_DERIVED", "A_FILE", "A_PARAM", "B_SELECTOR"}
	if !slices.Equal(got, want) {
		t.Fatalf("found %v, want %v", got, want)
	}
	if loc := reads["A_CLOSURE"]; len(loc) != 1 || loc[0] != "a/a.go:19" {
		t.Errorf("A_CLOSURE read at %v, want a/a.go:19", loc)
	}
	var keys []string
	for _, p := range problems {
		keys = append(keys, p.key)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"a/a.go:dynamic", `a/a.go:strings.ToUpper("x")`}) {
		t.Fatalf("unresolved reads %v", keys)
	}
}

// moduleRoot is the directory of the main module's go.mod, and its path.
func moduleRoot(t *testing.T) (dir, modPath string) {
	t.Helper()
	dir, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("go.mod names no module")
	}
	return dir, string(m[1])
}

// moduleSources reads every non-test .go file of the module rooted at root,
// keyed by slash path relative to it. Nested modules (bench/), testdata,
// node_modules and hidden directories are not part of it.
func moduleSources(t *testing.T, root string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if p != root && (name == "testdata" || name == "node_modules" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if p != root {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir // another module (bench/)
				}
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[rel] = data
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("found only %d source files under %s", len(files), root)
	}
	return files
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// mentions reports whether doc names the variable as a whole word.
func mentions(doc, name string) bool {
	return regexp.MustCompile(`(^|[^A-Za-z0-9_])` + regexp.QuoteMeta(name) + `([^A-Za-z0-9_]|$)`).MatchString(doc)
}

// unresolvedRead is a read whose variable name the scanner cannot tell.
type unresolvedRead struct {
	pos string // file:line
	key string // file:expression, the dynamicReads key
}

// envReader is a function that reads the variable named by its argument at
// index arg (-1: any env-shaped string literal among its arguments, for
// helpers whose name says "env" but whose shape is unknown).
type envReader struct{ arg int }

// baseReaders are the callee names that read a variable named by their first
// argument: os.Getenv, os.LookupEnv, and the getenv/lookupEnv functions the
// code passes around so tests can inject an environment.
var baseReaders = map[string]bool{"getenv": true, "lookupenv": true, "envlookup": true}

// notReaders are callee names with "env" in them that read nothing.
var notReaders = map[string]bool{"setenv": true, "unsetenv": true, "clearenv": true, "environ": true}

var envShaped = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// scanEnvReads finds environment reads in files (slash path -> source of
// module modPath): calls of a base reader, of a function whose string
// parameter reaches a reader (closures included, to a fixpoint), and string
// literals passed to a helper named *env*. A name is a string literal or a
// string constant (of the file's package, or another package of the module
// through its import). It returns the variables with the file:line of each
// read, and the reads it could not resolve.
func scanEnvReads(files map[string][]byte, modPath string) (map[string][]string, []unresolvedRead) {
	fset := token.NewFileSet()
	type file struct {
		path    string
		dir     string
		ast     *ast.File
		imports map[string]string // local name -> package dir, for the module's packages
	}
	var parsed []file
	consts := map[string]map[string]string{} // package dir -> const name -> value
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var problems []unresolvedRead
	for _, p := range paths {
		f, err := parser.ParseFile(fset, p, files[p], parser.SkipObjectResolution)
		if err != nil {
			problems = append(problems, unresolvedRead{pos: p, key: "parse error: " + err.Error()})
			continue
		}
		dir := pathDir(p)
		imports := map[string]string{}
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			rel, ok := strings.CutPrefix(ip, modPath+"/")
			if !ok {
				continue
			}
			local := rel[strings.LastIndex(rel, "/")+1:]
			if imp.Name != nil {
				local = imp.Name.Name
			}
			imports[local] = rel
		}
		parsed = append(parsed, file{path: p, dir: dir, ast: f, imports: imports})
		if consts[dir] == nil {
			consts[dir] = map[string]string{}
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if s, ok := stringLit(vs.Values[i]); ok {
							consts[dir][name.Name] = s
						}
					}
				}
			}
		}
	}

	// readers: functions known to read the variable their argument names.
	// Package functions are keyed "dir.Name", closures "path#name".
	readers := map[string]envReader{}
	calleeReader := func(f file, call *ast.CallExpr) (envReader, bool) {
		var name string
		switch fn := call.Fun.(type) {
		case *ast.Ident:
			name = fn.Name
			if r, ok := readers[f.path+"#"+name]; ok {
				return r, true
			}
			if r, ok := readers[f.dir+"."+name]; ok {
				return r, true
			}
		case *ast.SelectorExpr:
			name = fn.Sel.Name
			if pkg, ok := fn.X.(*ast.Ident); ok {
				if dir, ok := f.imports[pkg.Name]; ok {
					if r, ok := readers[dir+"."+name]; ok {
						return r, true
					}
				}
			}
		default:
			return envReader{}, false
		}
		lower := strings.ToLower(name)
		switch {
		case baseReaders[lower]:
			return envReader{arg: 0}, true
		case notReaders[lower]:
			return envReader{}, false
		case strings.Contains(lower, "env"):
			return envReader{arg: -1}, true
		}
		return envReader{}, false
	}

	// Derive readers to a fixpoint: a function one of whose string
	// parameters is passed, as is, where a reader takes its name.
	for changed := true; changed; {
		changed = false
		for _, f := range parsed {
			forEachFunc(f.ast, func(key string, params []string, body *ast.BlockStmt) {
				if key == "" || body == nil {
					return
				}
				full := f.dir + "." + key
				if strings.HasPrefix(key, "#") {
					full = f.path + key
				}
				if _, done := readers[full]; done {
					return
				}
				ast.Inspect(body, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					r, ok := calleeReader(f, call)
					if !ok || r.arg < 0 || r.arg >= len(call.Args) {
						return true
					}
					if id, ok := call.Args[r.arg].(*ast.Ident); ok {
						if i := slices.Index(params, id.Name); i >= 0 {
							readers[full] = envReader{arg: i}
							changed = true
							return false
						}
					}
					return true
				})
			})
		}
	}

	reads := map[string][]string{}
	for _, f := range parsed {
		resolve := func(e ast.Expr) (string, bool) {
			if s, ok := stringLit(e); ok {
				return s, true
			}
			switch x := e.(type) {
			case *ast.Ident:
				s, ok := consts[f.dir][x.Name]
				return s, ok
			case *ast.SelectorExpr:
				if pkg, ok := x.X.(*ast.Ident); ok {
					s, ok := consts[f.imports[pkg.Name]][x.Sel.Name]
					return s, ok
				}
			}
			return "", false
		}
		var enclosing [][]string // parameters of the functions around the node
		var visit func(n ast.Node) bool
		visit = func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.FuncDecl:
				enclosing = append(enclosing, paramNames(x.Type))
				if x.Body != nil {
					ast.Inspect(x.Body, visit)
				}
				enclosing = enclosing[:len(enclosing)-1]
				return false
			case *ast.FuncLit:
				enclosing = append(enclosing, paramNames(x.Type))
				ast.Inspect(x.Body, visit)
				enclosing = enclosing[:len(enclosing)-1]
				return false
			case *ast.CallExpr:
				r, ok := calleeReader(f, x)
				if !ok {
					return true
				}
				line := fmt.Sprintf("%s:%d", f.path, fset.Position(x.Pos()).Line)
				if r.arg < 0 {
					for _, a := range x.Args {
						if s, ok := stringLit(a); ok && envShaped.MatchString(s) {
							reads[s] = append(reads[s], line)
						}
					}
					return true
				}
				if r.arg >= len(x.Args) {
					return true
				}
				arg := x.Args[r.arg]
				if name, ok := resolve(arg); ok {
					reads[name] = append(reads[name], line)
					return true
				}
				if id, ok := arg.(*ast.Ident); ok && slices.ContainsFunc(enclosing, func(ps []string) bool { return slices.Contains(ps, id.Name) }) {
					return true // forwards a caller's name: the caller's read is counted
				}
				problems = append(problems, unresolvedRead{pos: line, key: f.path + ":" + exprString(fset, arg)})
			}
			return true
		}
		for _, d := range f.ast.Decls {
			ast.Inspect(d, visit)
		}
	}
	return reads, problems
}

// forEachFunc calls fn for every package function (key "Name") and every
// closure assigned to a name (key "#name"), with its parameter names.
func forEachFunc(f *ast.File, fn func(key string, params []string, body *ast.BlockStmt)) {
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.FuncDecl:
			if x.Recv == nil {
				fn(x.Name.Name, paramNames(x.Type), x.Body)
			}
		case *ast.AssignStmt:
			for i, rhs := range x.Rhs {
				if lit, ok := rhs.(*ast.FuncLit); ok && i < len(x.Lhs) {
					if id, ok := x.Lhs[i].(*ast.Ident); ok {
						fn("#"+id.Name, paramNames(lit.Type), lit.Body)
					}
				}
			}
		case *ast.ValueSpec:
			for i, v := range x.Values {
				if lit, ok := v.(*ast.FuncLit); ok && i < len(x.Names) {
					fn("#"+x.Names[i].Name, paramNames(lit.Type), lit.Body)
				}
			}
		}
		return true
	})
}

func paramNames(ft *ast.FuncType) []string {
	var out []string
	if ft.Params == nil {
		return out
	}
	for _, field := range ft.Params.List {
		if len(field.Names) == 0 {
			out = append(out, "_")
		}
		for _, n := range field.Names {
			out = append(out, n.Name)
		}
	}
	return out
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

func exprString(fset *token.FileSet, e ast.Expr) string {
	if start, end := fset.Position(e.Pos()), fset.Position(e.End()); start.Line != end.Line {
		return fmt.Sprintf("expression at line %d", start.Line)
	}
	return types.ExprString(e)
}

func pathDir(p string) string {
	if i := strings.LastIndex(p, "/"); i >= 0 {
		return p[:i]
	}
	return "."
}
