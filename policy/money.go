package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// microsPerUnit is the number of micros in one unit of a currency.
const microsPerUnit = 1_000_000

// Money is an amount in integer micros (millionths) of an ISO 4217 currency.
// Prices per hour, egress prices per GB, caps and budgets all use it, so no
// decision ever depends on float rounding.
type Money struct {
	Micros   int64  `json:"micros" yaml:"micros" mapstructure:"micros"`
	Currency string `json:"currency" yaml:"currency" mapstructure:"currency"`
}

// ErrNotMoney is ParseMoney's error for text that is not an amount and a
// currency code at all ("2.50", "cheap").
var ErrNotMoney = errors.New(`want an amount and a currency, like "2.50 EUR"`)

// ParseMoney reads an amount written as "2.50 EUR" (decimal amount, a space,
// a three-letter currency code). At most six decimals are kept exactly.
func ParseMoney(s string) (Money, error) {
	amount, currency, ok := strings.Cut(strings.TrimSpace(s), " ")
	currency = strings.TrimSpace(currency)
	if !ok || !validCurrency(currency) {
		return Money{}, fmt.Errorf("%q: %w", s, ErrNotMoney)
	}
	micros, err := parseMicros(amount)
	if err != nil {
		return Money{}, fmt.Errorf("%q: %w", s, err)
	}
	return Money{Micros: micros, Currency: currency}, nil
}

// parseMicros reads a non-negative decimal number into micros.
func parseMicros(s string) (int64, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" {
		return 0, fmt.Errorf("empty amount")
	}
	if len(frac) > 6 {
		return 0, fmt.Errorf("amount %q has more than 6 decimals", s)
	}
	for _, part := range []string{whole, frac} {
		for _, c := range part {
			if c < '0' || c > '9' {
				return 0, fmt.Errorf("amount %q is not a non-negative decimal number", s)
			}
		}
	}
	var w int64
	if whole != "" {
		var err error
		if w, err = strconv.ParseInt(whole, 10, 64); err != nil || w > math.MaxInt64/microsPerUnit {
			return 0, fmt.Errorf("amount %q is too large", s)
		}
	}
	f := int64(0)
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	}
	if w*microsPerUnit > math.MaxInt64-f {
		return 0, fmt.Errorf("amount %q is too large", s)
	}
	return w*microsPerUnit + f, nil
}

// validCurrency reports whether code has the shape of an ISO 4217 code.
func validCurrency(code string) bool {
	if len(code) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if code[i] < 'A' || code[i] > 'Z' {
			return false
		}
	}
	return true
}

// String formats m as "2.50 EUR": at least two decimals, more only when
// they are not zero.
func (m Money) String() string {
	var b strings.Builder
	m.appendTo(&b)
	if m.Currency != "" {
		b.WriteByte(' ')
		b.WriteString(m.Currency)
	}
	return b.String()
}

// appendTo writes the amount of m without its currency.
func (m Money) appendTo(b *strings.Builder) {
	v := m.Micros
	if v < 0 {
		b.WriteByte('-')
		v = -v
	}
	var buf [20]byte
	b.Write(strconv.AppendInt(buf[:0], v/microsPerUnit, 10))
	frac := strconv.AppendInt(buf[:0], v%microsPerUnit+microsPerUnit, 10)[1:]
	n := len(frac)
	for n > 2 && frac[n-1] == '0' {
		n--
	}
	b.WriteByte('.')
	b.Write(frac[:n])
}

// UnmarshalText reads the "2.50 EUR" form, so a config decoder that honours
// encoding.TextUnmarshaler (viper with mapstructure's TextUnmarshallerHookFunc)
// can fill Money fields from strings.
func (m *Money) UnmarshalText(text []byte) error {
	v, err := ParseMoney(string(text))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// UnmarshalJSON accepts both the object form that Money marshals to and the
// "2.50 EUR" string form.
func (m *Money) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		return m.UnmarshalText([]byte(s))
	}
	type plain Money
	return json.Unmarshal(data, (*plain)(m))
}

// mulDiv returns a*b/c for non-negative a, b and positive c without
// intermediate overflow, saturating at MaxInt64.
func mulDiv(a, b, c int64) int64 {
	if a <= 0 || b <= 0 || c <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi == 0 {
		// The common case; a 64-bit division by a constant c compiles to
		// a multiplication where mulDiv is inlined.
		return int64(min(lo/uint64(c), math.MaxInt64))
	}
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// addSat adds two non-negative amounts, saturating at MaxInt64.
func addSat(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

// rates converts amounts into one base currency. rate[c] is the value of one
// unit of c in micros of the base currency.
type rates struct {
	base string
	rate map[string]int64
	// few lists the rates too when there are no more than fewRates of
	// them: placement converts every offer's prices, and comparing a few
	// three-letter codes is cheaper than hashing one.
	few []currencyRate
}

const fewRates = 8

type currencyRate struct {
	currency string
	rate     int64
}

func (r *rates) set(currency string, rate int64) {
	if _, ok := r.rate[currency]; !ok {
		r.few = append(r.few, currencyRate{currency, rate})
	}
	r.rate[currency] = rate
	for i := range r.few {
		if r.few[i].currency == currency {
			r.few[i].rate = rate
		}
	}
}

func (r *rates) lookup(currency string) (int64, bool) {
	if len(r.rate) > fewRates {
		rate, ok := r.rate[currency]
		return rate, ok
	}
	for _, f := range r.few {
		if f.currency == currency {
			return f.rate, true
		}
	}
	return 0, false
}

// toBase converts m into micros of the base currency; ok is false when the
// currency has no rate.
func (r *rates) toBase(m Money) (int64, bool) {
	if m.Currency == r.base {
		return m.Micros, true
	}
	rate, ok := r.lookup(m.Currency)
	if !ok {
		return 0, false
	}
	if m.Micros < 0 {
		return -mulDiv(-m.Micros, rate, microsPerUnit), true
	}
	return mulDiv(m.Micros, rate, microsPerUnit), true
}

// money wraps base-currency micros as Money.
func (r *rates) money(micros int64) Money { return Money{Micros: micros, Currency: r.base} }
