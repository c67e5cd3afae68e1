package transcript

import "github.com/pidispatch/pidispatch/internal/redact"

// Redacted replaces every redacted value.
const Redacted = redact.Redacted

// NewRedactor redacts each non-empty value, as it is and in its
// JSON-escaped form.
func NewRedactor(values []string) *redact.Redactor { return redact.New(values) }

// Redactor removes secret values from text (package internal/redact).
type Redactor = redact.Redactor
