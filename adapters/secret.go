package adapters

import "log/slog"

// Secret holds a credential. It prints, logs and marshals as [redacted];
// only Reveal returns the value, at the one place it is handed over.
type Secret struct{ value string }

// NewSecret wraps value.
func NewSecret(value string) Secret { return Secret{value: value} }

// Reveal returns the value.
func (s Secret) Reveal() string { return s.value }

// IsZero reports whether the secret is empty.
func (s Secret) IsZero() bool { return s.value == "" }

const redacted = "[redacted]"

func (s Secret) String() string {
	if s.value == "" {
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
