package gateway

import (
	"encoding/json"
	"errors"
	"math"
	"net"
	"strconv"
	"strings"
)

// Bounds of a call's input the request's bytes do not show. A token is at
// least one byte of the request's JSON, so the bytes bound every text;
// these are added for what the provider makes of a block or a tool.
const (
	// InputOverheadTokens covers what a provider adds to every request: the
	// tool-use system prompt, the client tools' definitions, message framing.
	InputOverheadTokens = 4096
	// ImageTokens bounds one image block, however few bytes it takes or
	// wherever it is fetched from: providers resize an image to a bounded
	// size before they count it (Anthropic at most about 1,600 tokens,
	// OpenAI's patch models about 2,500 for the smallest ones).
	ImageTokens = 6000
	// DocumentTokens bounds one document block not sent as plain text (a
	// PDF by bytes, URL or file id): the providers' limit of 100 pages, at
	// 6,000 tokens a page (the page's text and its image).
	DocumentTokens = 100 * 6000
	// DefaultOutputTokens is the bound given to a call that sets none, when
	// the caps afford it: every current model can answer that long.
	DefaultOutputTokens = 8192
	// MinOutputTokens is the shortest answer the gateway lowers a call to;
	// a cap that cannot afford it refuses the call.
	MinOutputTokens = 256
	// maxDepth bounds the nesting the request parser follows.
	maxDepth = 128
)

// reqInfo is what the gateway reads of a request body before it forwards
// it: the model, the output bound and the blocks that bound the input.
type reqInfo struct {
	model  string
	images int
	docs   int
	// unbounded names what makes the call's input unbounded (a server
	// tool, a stored conversation); "" when the request bounds it.
	unbounded string
	// out is the request's output bound; -1 when it sets none (or none the
	// gateway can read). n multiplies it (OpenAI's n choices).
	out int64
	n   int64
	// fields are the top-level output-bound fields present, with their
	// value's span in the body.
	fields []span
	// open is the offset just after the body's opening brace; empty is
	// true for "{}".
	open  int
	empty bool
}

// span is a top-level field's value in the body.
type span struct {
	name       string
	start, end int
}

// outputFields are the fields that bound a call's output, by API.
var outputFields = map[string]bool{"max_tokens": true, "max_completion_tokens": true, "max_output_tokens": true}

// unboundedKeys are top-level fields that make the provider add input the
// request does not carry: server tools and stored state.
var unboundedKeys = map[string]bool{
	"mcp_servers": true, "web_search_options": true, "container": true,
	"previous_response_id": true, "conversation": true, "prompt": true, "prediction": true,
}

// errBadJSON is a request body the gateway cannot read as one JSON object.
var errBadJSON = errors.New("the request body is not one JSON object")

// parseRequest reads body's model, output bound and input blocks in one
// pass, allocating only for the few strings it keeps. Keys and type names
// are read with their escapes decoded, and a bound field named twice is
// refused, so the provider reads the body as the gateway did.
func parseRequest(body []byte) (reqInfo, error) {
	p := &parser{b: body}
	info := reqInfo{out: -1, n: 1}
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return info, errBadJSON
	}
	info.open = p.i + 1
	p.info = &info
	if _, err := p.object(0, true); err != nil {
		return info, err
	}
	p.ws()
	if p.i != len(p.b) {
		return info, errBadJSON
	}
	info.empty = true
	for _, c := range body[info.open:] {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '}' {
			info.empty = false
			break
		}
	}
	return info, nil
}

type parser struct {
	b    []byte
	i    int
	info *reqInfo
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// str skips a string at p.i and returns its decoded text when keep (or
// when it is short: keys and type names are), else "".
func (p *parser) str(keep bool) (string, error) {
	start := p.i
	p.i++
	escaped := false
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '\\':
			escaped = true
			p.i += 2
		case c == '"':
			p.i++
			raw := p.b[start:p.i]
			if !keep && len(raw) > 64 {
				return "", nil
			}
			if !escaped {
				return string(raw[1 : len(raw)-1]), nil
			}
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return "", errBadJSON
			}
			return s, nil
		case c < 0x20:
			return "", errBadJSON
		default:
			p.i++
		}
	}
	return "", errBadJSON
}

// value skips one value at p.i and returns, for an object, its "type".
func (p *parser) value(depth int) (string, error) {
	p.ws()
	if p.i >= len(p.b) {
		return "", errBadJSON
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(depth+1, false)
	case c == '[':
		_, err := p.array(depth+1, nil)
		return "", err
	case c == '"':
		_, err := p.str(false)
		return "", err
	default:
		start := p.i
		for p.i < len(p.b) && !strings.ContainsRune(",}] \t\n\r", rune(p.b[p.i])) {
			p.i++
		}
		if !json.Valid(p.b[start:p.i]) {
			return "", errBadJSON
		}
		return "", nil
	}
}

// array skips an array; each, when set, gets the type of each object in it.
func (p *parser) array(depth int, each func(typ string)) (int, error) {
	if depth > maxDepth {
		return 0, errBadJSON
	}
	p.i++
	n := 0
	for {
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == ']' && n == 0 {
			p.i++
			return 0, nil
		}
		typ, err := p.value(depth)
		if err != nil {
			return 0, err
		}
		if each != nil {
			each(typ)
		}
		n++
		p.ws()
		if p.i >= len(p.b) {
			return 0, errBadJSON
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return n, nil
		default:
			return 0, errBadJSON
		}
	}
}

// object skips an object, counts it when it is an image or document
// block, and reads the request's own fields when top.
func (p *parser) object(depth int, top bool) (typ string, err error) {
	if depth > maxDepth {
		return "", errBadJSON
	}
	p.i++
	o := objState{top: top}
	// seen are the keys read so far, at the top only; kept out of o, which
	// would take it to the heap.
	var seen map[string]bool
	if top {
		seen = map[string]bool{}
	}
	for first := true; ; first = false {
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == '}' && first {
			p.i++
			break
		}
		end, err := p.member(depth, &o, seen)
		if err != nil {
			return "", err
		}
		if end {
			break
		}
	}
	p.countBlock(&o)
	return o.typ, nil
}

// objState is what object keeps of one object as it reads its members.
type objState struct {
	top                bool
	typ, sourceType    string
	imageURL, typeSeen bool
}

// member reads one key, its value and what follows; end reports the object's closing brace.
func (p *parser) member(depth int, o *objState, seen map[string]bool) (end bool, err error) {
	key, err := p.key(o, seen)
	if err != nil {
		return false, err
	}
	start := p.i
	if err := p.memberValue(depth, key, o); err != nil {
		return false, err
	}
	if key == "image_url" {
		o.imageURL = true
	}
	if o.top {
		if err := p.topField(key, start); err != nil {
			return false, err
		}
	}
	return p.memberEnd()
}

// key reads a key and its colon, refusing a key named twice that the provider could read otherwise.
func (p *parser) key(o *objState, seen map[string]bool) (string, error) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", errBadJSON
	}
	key, err := p.str(true)
	if err != nil {
		return "", err
	}
	if o.top && seen[key] || key == "type" && o.typeSeen {
		return "", errors.New("the request names " + strconv.Quote(key) + " twice in one object")
	}
	if o.top {
		seen[key] = true
	}
	o.typeSeen = o.typeSeen || key == "type"
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != ':' {
		return "", errBadJSON
	}
	p.i++
	p.ws()
	if p.i >= len(p.b) {
		return "", errBadJSON
	}
	return key, nil
}

// memberValue reads a value, keeping what bounds the call: a type, the model, the tools, a source's type.
func (p *parser) memberValue(depth int, key string, o *objState) (err error) {
	switch {
	case key == "type" && p.b[p.i] == '"':
		o.typ, err = p.str(true)
	case o.top && key == "model" && p.b[p.i] == '"':
		p.info.model, err = p.str(true)
	case o.top && key == "tools" && p.b[p.i] == '[':
		_, err = p.array(depth+1, func(t string) {
			if !clientTool(t) && p.info.unbounded == "" {
				p.info.unbounded = "server tool " + strconv.Quote(t)
			}
		})
	case key == "source" && p.b[p.i] == '{':
		o.sourceType, err = p.object(depth+1, false)
	default:
		_, err = p.value(depth)
	}
	return err
}

// topField notes a request field that bounds the call: an output bound, n, or one that unbounds the input.
func (p *parser) topField(key string, start int) error {
	switch {
	case outputFields[key]:
		p.info.fields = append(p.info.fields, span{key, start, p.i})
	case key == "n":
		n, ok := readCount(p.b[start:p.i])
		if !ok || n < 1 || n > 128 {
			return errors.New(`the request's "n" must be a whole number from 1 to 128`)
		}
		p.info.n = n
	case unboundedKeys[key] && p.info.unbounded == "":
		p.info.unbounded = strconv.Quote(key)
	}
	return nil
}

// memberEnd reads the comma after a member, or the object's closing brace (end).
func (p *parser) memberEnd() (end bool, err error) {
	p.ws()
	if p.i >= len(p.b) {
		return false, errBadJSON
	}
	switch p.b[p.i] {
	case '}':
		p.i++
		return true, nil
	case ',':
		p.i++
		return false, nil
	}
	return false, errBadJSON
}

// countBlock counts an image or document block, whose input its bytes do not bound.
func (p *parser) countBlock(o *objState) {
	switch {
	case o.typ == "image" || o.typ == "input_image" || o.typ == "image_url" || o.imageURL:
		p.info.images++
	case (o.typ == "document" || o.typ == "input_file" || o.typ == "file") && o.sourceType != "text" && o.sourceType != "content":
		p.info.docs++
	}
}

// clientTool reports whether a tool of this type runs on the client: its
// results come back in a later request's bytes. Any other type (web
// search, web fetch, code execution, MCP) runs at the provider, which adds
// its results to the call's input.
func clientTool(typ string) bool {
	switch typ {
	case "", "custom", "function":
		return true
	}
	for _, p := range []string{"bash_", "text_editor_", "computer_", "memory_"} {
		if strings.HasPrefix(typ, p) {
			return true
		}
	}
	return false
}

// readCount reads a JSON whole number; ok is false for anything else.
func readCount(raw []byte) (int64, bool) {
	var f float64
	if len(raw) == 0 || raw[0] < '0' || raw[0] > '9' || json.Unmarshal(raw, &f) != nil || f != math.Trunc(f) || f < 0 {
		return 0, false
	}
	return int64(min(f, 1e12)), true
}

// inputBound is the most input tokens the call can be billed.
func (r reqInfo) inputBound(bodyBytes int) int64 {
	return int64(bodyBytes) + InputOverheadTokens + int64(r.images)*ImageTokens + int64(r.docs)*DocumentTokens
}

// readBound sets r.out from the bound fields: the largest of them (the
// provider may read any), or -1 when one is not a whole number.
func (r *reqInfo) readBound(body []byte) {
	r.out = -1
	for i, f := range r.fields {
		n, ok := readCount(body[f.start:f.end])
		if !ok {
			r.out = -1
			return
		}
		if i == 0 || n > r.out {
			r.out = n
		}
	}
}

// boundField is the field that bounds the output of a call to path at
// provider, when the request sets none.
func boundField(provider, path string) string {
	switch {
	case strings.HasSuffix(path, "/responses") || strings.HasSuffix(path, "responses"):
		return "max_output_tokens"
	case provider == "openai" && strings.HasSuffix(path, "chat/completions"):
		return "max_completion_tokens"
	}
	return "max_tokens"
}

// withBound is body with every bound field set to n, or field added when
// the request has none: the body's own bytes around the new number, never
// a copy of them.
func withBound(body []byte, r reqInfo, field string, n int64) net.Buffers {
	num := []byte(strconv.FormatInt(n, 10))
	if len(r.fields) == 0 {
		add := `"` + field + `":` + string(num)
		if !r.empty {
			add += ","
		}
		return net.Buffers{body[:r.open], []byte(add), body[r.open:]}
	}
	out := make(net.Buffers, 0, 2*len(r.fields)+1)
	at := 0
	for _, f := range r.fields {
		out = append(out, body[at:f.start], num)
		at = f.end
	}
	return append(out, body[at:])
}
