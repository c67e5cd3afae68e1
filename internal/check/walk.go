package check

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// MaxJSONDepth bounds how deeply a document Walk reads may nest. Real
// documents (a job, a policy file, a triggers file) nest a few levels; the
// bound keeps hostile input cheap.
const MaxJSONDepth = 64

// KeyMatch says when two keys of one object are the same key.
type KeyMatch int

const (
	// ExactKeys: only byte-equal keys, for a reader that looks keys up in a
	// map.
	ExactKeys KeyMatch = iota
	// FoldedKeys: keys equal under simple Unicode case folding, as
	// encoding/json matches a struct's fields ("to" and "To" are one field).
	FoldedKeys
)

// DuplicateKeyError is an object that holds a key twice. Readers disagree on
// which occurrence wins (encoding/json and JavaScript's JSON.parse keep the
// last), so two hosts could read one file differently.
type DuplicateKeyError struct {
	// Path is where the object is: "" for the top level, else a path such as
	// triggers[0].on (a key that is not a plain word is quoted).
	Path string
	// Key is the second occurrence, as written.
	Key string
}

func (e *DuplicateKeyError) Error() string {
	return where(e.Path) + ": key " + Quote(e.Key) + " appears twice"
}

// DepthError is a document nested deeper than Max levels. Path is where the
// first too-deep object or array starts, in DuplicateKeyError's form.
type DepthError struct {
	Path string
	Max  int
}

func (e *DepthError) Error() string {
	return fmt.Sprintf("%s: nested deeper than %d levels", where(e.Path), e.Max)
}

func where(path string) string {
	if path == "" {
		return "the top level"
	}
	return path
}

// Walk reads data token by token, once: one valid JSON value and nothing after
// it, no object holding a key twice (as match compares keys: a
// *DuplicateKeyError) and no nesting deeper than MaxJSONDepth (a *DepthError).
// A syntax error is returned without encoding/json's "json: " prefix.
func Walk(data []byte, match KeyMatch) error {
	w := &walker{match: match}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if len(w.stack) != 0 {
				return errors.New("document ends inside a value")
			}
			return errors.New("document is empty")
		}
		if err != nil {
			return errors.New(strings.TrimPrefix(err.Error(), "json: "))
		}
		if err := w.token(tok); err != nil {
			return err
		}
		if len(w.stack) == 0 {
			if _, err := dec.Token(); err != io.EOF {
				return errors.New("unexpected data after the top-level value")
			}
			return nil
		}
	}
}

// walker is Walk's state: the open objects and arrays, innermost last.
type walker struct {
	match KeyMatch
	stack []*frame
}

type frame struct {
	obj       bool
	expectKey bool                // an object's next string is a key
	keys      map[string]struct{} // an object's keys so far, as match compares them
	path      string              // where this object or array is
	key       string              // an object's current key, as written
	index     int                 // an array's current index
}

func (w *walker) token(tok json.Token) error {
	n := len(w.stack)
	if k, ok := tok.(string); ok && n > 0 && w.stack[n-1].obj && w.stack[n-1].expectKey {
		return w.key(w.stack[n-1], k)
	}
	switch tok {
	case json.Delim('{'), json.Delim('['):
		if n >= MaxJSONDepth {
			return &DepthError{Path: w.childPath(), Max: MaxJSONDepth}
		}
		obj := tok == json.Delim('{')
		f := &frame{obj: obj, expectKey: obj, path: w.childPath()}
		if obj {
			f.keys = map[string]struct{}{}
		}
		w.stack = append(w.stack, f)
	case json.Delim('}'), json.Delim(']'):
		w.stack = w.stack[:n-1]
		w.valueDone()
	default:
		w.valueDone()
	}
	return nil
}

func (w *walker) key(top *frame, k string) error {
	folded := k
	if w.match == FoldedKeys {
		folded = foldKey(k)
	}
	if _, dup := top.keys[folded]; dup {
		return &DuplicateKeyError{Path: top.path, Key: k}
	}
	top.keys[folded] = struct{}{}
	top.key = k
	top.expectKey = false
	return nil
}

// childPath is the path of the value the innermost container reads next.
func (w *walker) childPath() string {
	n := len(w.stack)
	if n == 0 {
		return ""
	}
	top := w.stack[n-1]
	if !top.obj {
		return top.path + "[" + strconv.Itoa(top.index) + "]"
	}
	seg := top.key
	if !plainKey(seg) {
		seg = Quote(seg)
	}
	if top.path == "" {
		return seg
	}
	return top.path + "." + seg
}

// valueDone moves the innermost container past the value just read.
func (w *walker) valueDone() {
	if n := len(w.stack); n > 0 {
		if top := w.stack[n-1]; top.obj {
			top.expectKey = true
		} else {
			top.index++
		}
	}
}

// plainKey reports whether k reads unambiguously in a path unquoted.
func plainKey(k string) bool {
	if k == "" || len(k) > 64 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
