package adapters

import "log/slog"

// Secret holds a credential. It prints, logs and marshals as [redacted];
// only Reveal returns the value, at the one place it is handed over. The
// value sits behind a pointer, so even a struct that holds a Secret in an
// unexported field prints an address, never the value.
type Secret struct{ p *string }

// NewSecret wraps value.
func NewSecret(value string) Secret {
	if value == "" {
		return Secret{}
	}
	return Secret{p: &value}
}

// Reveal returns the value.
func (s Secret) Reveal() string {
	if s.p == nil {
		return ""
	}
	return *s.p
}

// IsZero reports whether the secret is empty.
func (s Secret) IsZero() bool { return s.p == nil }

const redacted = "[redacted]"

func (s Secret) String() string {
	if s.p == nil {
		return ""
	}
	return redacted
}

// GoString keeps %#v from printing the value.
func (s Secret) GoString() string { return "adapters.Secret{" + s.String() + "}" }

// LogValue keeps slog from printing the value.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText keeps encoders from writing the value.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
