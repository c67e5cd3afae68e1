package envfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseSystemdSemantics(t *testing.T) {
	src := "# comment\n" +
		"; also a comment\n" +
		"\n" +
		"  PLAIN = value with  spaces   \n" +
		"EMPTY=\n" +
		"SINGLE='keep \\n $x \"as is\"'\n" +
		"DOUBLE=\"a \\\"q\\\" \\\\ \\$ \\x\"\n" +
		"JOINED=\"ab\"  'cd'ef\n" +
		"CONT=one\\\n two\n" +
		"MULTI=\"line1\nline2\"\n" +
		"HASH=a#b\n" +
		"ESCAPED=a \\# b\n" +
		"QUOTED=\"x # y\"\n" +
		"URL=redis://:p%23w@h:6379/0\n" +
		"PLAIN=last wins\n" +
		"AFTER=multi-line counted"
	got, err := Parse(strings.NewReader(src), "t.env")
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{"PLAIN", "value with  spaces", 4},
		{"EMPTY", "", 5},
		{"SINGLE", `keep \n $x "as is"`, 6},
		{"DOUBLE", `a "q" \ $ \x`, 7},
		{"JOINED", "abcdef", 8},
		{"CONT", "one two", 9},
		{"MULTI", "line1\nline2", 11},
		{"HASH", "a#b", 13},
		{"ESCAPED", "a # b", 14},
		{"QUOTED", "x # y", 15},
		{"URL", "redis://:p%23w@h:6379/0", 16},
		{"PLAIN", "last wins", 17},
		{"AFTER", "multi-line counted", 18},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseRefusesMalformedLines(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"A=1\nNOEQUALS\n", "t.env:2: not a KEY=VALUE line"},
		{"export A=1\n", `t.env:1: "export A": remove "export "`},
		{"1A=1\n", `t.env:1: "1A" is not a variable name`},
		{"A B=1\n", `t.env:1: "A B" is not a variable name`},
		{"A=3     # jobs at once\n", `t.env:1: A: the value holds a comment ("# jobs at once")`},
		{"\n\nA=   # unset\n", `t.env:3: A: the value holds a comment ("# unset")`},
		{"A=\"x\" # c\n", `t.env:1: A: the value holds a comment`},
		{"A='open\n", "t.env:1: A: the ' quote is never closed"},
		{"A=\"open\n", "t.env:1: A: the \" quote is never closed"},
	} {
		_, err := Parse(strings.NewReader(tc.src), "t.env")
		var se *SyntaxError
		if !errors.As(err, &se) || !errors.Is(err, ErrSyntax) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q...", tc.src, err, tc.want)
		}
	}
}

func shellOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoadShellWinsOverTheFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile(".env", []byte("VALKEY_URL=redis://file:6379\nPI_WORKER_NAME=from-file\nPI_JOB_IMAGE=img:file\nPI_WEEKLY_CAP=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := Load(shellOf(map[string]string{"PI_WORKER_NAME": "from-shell", "PI_JOB_IMAGE": "img:file"}))
	if err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(dir, ".env")
	for _, tc := range []struct{ key, value, from string }{
		{"VALKEY_URL", "redis://file:6379", ".env file " + abs + ":1"},
		{"PI_WORKER_NAME", "from-shell", "shell (overrides " + abs + ":2)"},
		{"PI_JOB_IMAGE", "img:file", "shell"},
		{"PI_WEEKLY_CAP", "", "default"},
		{"PI_CONCURRENCY", "", "default"},
	} {
		if got := e.Getenv(tc.key); got != tc.value {
			t.Errorf("%s = %q, want %q", tc.key, got, tc.value)
		}
		if got := e.Describe(tc.key); got != tc.from {
			t.Errorf("%s from %q, want %q", tc.key, got, tc.from)
		}
	}
	if e.Path != abs {
		t.Errorf("Path %q", e.Path)
	}
}

func TestLoadPicksTheFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	// No ./.env and no PI_ENV_FILE: nothing read, no error.
	e, err := Load(shellOf(nil))
	if err != nil || e.Path != "" || e.Getenv("X") != "" {
		t.Fatalf("%+v %v", e, err)
	}
	other := filepath.Join(dir, "other.env")
	if err := os.WriteFile(other, []byte("X=other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(".env", []byte("X=dot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if e, err := Load(shellOf(map[string]string{Var: other})); err != nil || e.Getenv("X") != "other" {
		t.Fatalf("PI_ENV_FILE: %v %v", e, err)
	}
	if e, err := Load(shellOf(map[string]string{Var: "/dev/null"})); err != nil || e.Getenv("X") != "" {
		t.Fatalf("/dev/null: %v %v", e, err)
	}
	if e, err := Load(shellOf(nil)); err != nil || e.Getenv("X") != "dot" {
		t.Fatalf("./.env: %v %v", e, err)
	}
	// A named file must exist; a malformed one is refused naming the line.
	if _, err := Load(shellOf(map[string]string{Var: filepath.Join(dir, "missing.env")})); err == nil || !strings.Contains(err.Error(), ": file does not exist (named by PI_ENV_FILE): create it") {
		t.Fatalf("missing: %v", err)
	}
	if err := os.WriteFile(".env", []byte("X=1\nPI_CONCURRENCY=3 # jobs\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(shellOf(nil)); !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), ".env:2: PI_CONCURRENCY") {
		t.Fatalf("malformed: %v", err)
	}
	if _, err := Load(shellOf(map[string]string{Var: dir})); err == nil || !strings.Contains(err.Error(), "cannot read env file") {
		t.Fatalf("a folder: %v", err)
	}
}
