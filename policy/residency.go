package policy

import (
	"encoding/json"
	"slices"
	"strings"
)

// countrySet is a set of ISO 3166-1 alpha-2 codes, one bit per code, so that
// membership costs a shift and intersections cost eleven ANDs.
type countrySet [11]uint64

// countryIndex maps an alpha-2 code to its bit; ok is false for anything that
// is not two letters A–Z (an unknown or empty country belongs to no set).
// The EU's own abbreviations UK and EL are read as GB and GR.
func countryIndex(code string) (int, bool) {
	if len(code) != 2 || code[0] < 'A' || code[0] > 'Z' || code[1] < 'A' || code[1] > 'Z' {
		return 0, false
	}
	switch code {
	case "UK":
		code = "GB"
	case "EL":
		code = "GR"
	}
	return int(code[0]-'A')*26 + int(code[1]-'A'), true
}

func (s *countrySet) add(code string) bool {
	i, ok := countryIndex(code)
	if ok {
		s[i/64] |= 1 << (i % 64)
	}
	return ok
}

func (s *countrySet) has(code string) bool {
	i, ok := countryIndex(code)
	return ok && s[i/64]&(1<<(i%64)) != 0
}

func (s countrySet) and(o countrySet) countrySet {
	for i := range s {
		s[i] &= o[i]
	}
	return s
}

func (s countrySet) subsetOf(o countrySet) bool {
	for i := range s {
		if s[i]&^o[i] != 0 {
			return false
		}
	}
	return true
}

// codes lists the members in alphabetical order.
func (s countrySet) codes() []string {
	var out []string
	for i := 0; i < 26*26; i++ {
		if s[i/64]&(1<<(i%64)) != 0 {
			out = append(out, string([]byte{byte('A' + i/26), byte('A' + i%26)}))
		}
	}
	return out
}

func setOf(codes ...string) countrySet {
	var s countrySet
	for _, c := range codes {
		s.add(c)
	}
	return s
}

var euCountries = []string{
	"AT", "BE", "BG", "CY", "CZ", "DE", "DK", "EE", "ES", "FI", "FR", "GR", "HR", "HU",
	"IE", "IT", "LT", "LU", "LV", "MT", "NL", "PL", "PT", "RO", "SE", "SI", "SK",
}

// builtinClasses are the residency classes every configuration has.
var builtinClasses = map[string]countrySet{
	"EU":  setOf(euCountries...),
	"EEA": setOf(append(slices.Clone(euCountries), "IS", "LI", "NO")...),
	"CH":  setOf("CH"),
	"UK":  setOf("GB"),
}

// Class is a residency class: a named set of countries that a job's data may
// not leave. Workers use Contains to refuse a job placed outside their country.
type Class struct {
	Name string
	set  countrySet
}

// Contains reports whether country (ISO 3166-1 alpha-2) is inside the class.
// An unknown or empty country is inside no class.
func (c Class) Contains(country string) bool { return c.set.has(country) }

// Countries lists the class's countries in alphabetical order.
func (c Class) Countries() []string { return c.set.codes() }

// MarshalJSON writes the class as its name and countries.
func (c Class) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name      string   `json:"name"`
		Countries []string `json:"countries"`
	}{c.Name, c.Countries()})
}

// Residency returns the residency class named name (built-in or defined in
// rules), matched case-insensitively.
func Residency(rules Rules, name string) (Class, bool) {
	set, err := rules.classSet(name, nil)
	if err != nil {
		return Class{}, false
	}
	return Class{Name: strings.ToUpper(name), set: set}, true
}

// ResidencyDecision is the residency a decision was made under: the
// intersection of the job's own class and every matching rule's class.
type ResidencyDecision struct {
	// Class names the effective class; an intersection of several
	// different classes is written "EU∩DACH".
	Class string `json:"class"`
	// Countries lists the countries the job may run, store and log in.
	Countries []string `json:"countries"`
	// ImposedBy names who required it: "rule <name>" or "job".
	ImposedBy []string `json:"imposed_by"`
}

// Restricted reports whether any residency applies to the decision.
func (r ResidencyDecision) Restricted() bool { return len(r.ImposedBy) > 0 }

// Contains reports whether country is allowed under the decision. A decision
// without residency allows every country.
func (r ResidencyDecision) Contains(country string) bool {
	if !r.Restricted() {
		return true
	}
	if country == "UK" {
		country = "GB"
	} else if country == "EL" {
		country = "GR"
	}
	_, found := slices.BinarySearch(r.Countries, country)
	return found
}
