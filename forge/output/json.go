package output

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// jsonReader decodes one JSON document strictly, token by token: each
// object's keys are the known ones spelled exactly (encoding/json would
// take "Body" for "body"), none twice, each value of its type (a null is
// no string), and nothing follows the document.
type jsonReader struct {
	dec *json.Decoder
}

func newJSONReader(data []byte) *jsonReader {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return &jsonReader{dec: dec}
}

func (r *jsonReader) token(where string) (json.Token, error) {
	tok, err := r.dec.Token()
	switch {
	case errors.Is(err, io.EOF):
		return nil, fmt.Errorf("not valid JSON: it ends inside %s", where)
	case err != nil:
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	return tok, nil
}

// object reads an object, calling field for each key; field must read the
// key's value.
func (r *jsonReader) object(where string, field func(key string) error) error {
	tok, err := r.token(where)
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("%s is not a JSON object", where)
	}
	seen := map[string]bool{}
	for r.dec.More() {
		tok, err := r.token(where)
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if seen[key] {
			return fmt.Errorf("key %s is given twice in %s", quote(key), where)
		}
		seen[key] = true
		if err := field(key); err != nil {
			return err
		}
	}
	_, err = r.token(where) // the closing brace
	return err
}

// array reads an array, calling elem for each element; elem must read it.
func (r *jsonReader) array(where string, elem func(i int) error) error {
	tok, err := r.token(where)
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("%s is not a JSON array", where)
	}
	for i := 0; r.dec.More(); i++ {
		if err := elem(i); err != nil {
			return err
		}
	}
	_, err = r.token(where) // the closing bracket
	return err
}

func (r *jsonReader) str(where string) (string, error) {
	tok, err := r.token(where)
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("%s is not a string", where)
	}
	return s, nil
}

func (r *jsonReader) int64(where string) (int64, error) {
	tok, err := r.token(where)
	if err != nil {
		return 0, err
	}
	n, ok := tok.(json.Number)
	if !ok {
		return 0, fmt.Errorf("%s is not a number", where)
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s is not a whole number", where)
	}
	return v, nil
}

// end checks that nothing but blanks follows the document.
func (r *jsonReader) end() error {
	if _, err := r.dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("more than one JSON value (or text after the object)")
	}
	return nil
}
