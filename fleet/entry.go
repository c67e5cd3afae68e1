package fleet

// entryDoc is what a stream entry's signature covers: the stream's key binds
// it to its place, so a signed entry copied into another job's stream does
// not verify there.
func entryDoc(stream string, fields map[string]string) map[string]any {
	m := make(map[string]any, len(fields))
	for f, v := range fields {
		m[f] = v
	}
	return map[string]any{"kind": "entry", "stream": stream, "fields": m}
}

// SignEntry signs an entry of a Valkey stream: the stream's key and every
// field the writer adds, by name (the signature's own field left out).
func (k Key) SignEntry(stream string, fields map[string]string) (string, error) {
	return k.mac(entryDoc(stream, fields))
}

// VerifyEntry reports whether sig is k's signature of the entry's fields in
// the stream.
func (k Key) VerifyEntry(stream string, fields map[string]string, sig string) bool {
	return k.verify(entryDoc(stream, fields), sig)
}
