package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// CardMatches reports whether a card name (an offer's card or a device name
// reported by NVML) satisfies a card requirement. Both are split into
// upper-case tokens at every character that is not a letter or digit; vendor
// words (NVIDIA, AMD, Tesla, GeForce, …) are dropped; a number followed by
// "GB" or "G" becomes one memory token ("80 GB", "80G" → "80GB"); and
// "RTX4090" is read as "RTX 4090". The requirement matches when each of its
// tokens is one of the name's tokens.
//
// So a family matches every size and variant of it: H100 matches "NVIDIA H100
// 80GB HBM3" and "h100-sxm"; a size narrows it: A100-80GB matches
// "A100-SXM4-80GB" but never "A100-PCIE-40GB"; and L40 does not match L40S.
// An empty requirement matches nothing.
func CardMatches(name, requirement string) bool {
	want := CardTokens(requirement)
	return len(want) > 0 && tokensWithin(want, CardTokens(name))
}

// cardMatchesOffer is CardMatches for an offer: when the card's name does
// not say its memory, the offer's gpu_memory_gb does, so that A100-80GB
// matches an offer of card A100 with 80 GB and not one with 40 GB.
func cardMatchesOffer(name string, memGB int64, want []string) bool {
	return len(want) > 0 && tokensWithin(want, offerCardTokens(name, memGB))
}

// offerCardTokens is the tokens of an offer's card, with a memory token from
// memGB when the name carries none and memGB is known.
func offerCardTokens(name string, memGB int64) []string {
	have := CardTokens(name)
	if memGB > 0 && !slices.ContainsFunc(have, isMemoryToken) {
		have = append(have, strconv.FormatInt(memGB, 10)+"GB")
	}
	return have
}

func tokensWithin(want, have []string) bool {
	for _, t := range want {
		if !slices.Contains(have, t) {
			return false
		}
	}
	return true
}

// vendorWords are dropped from card names: offers say "H100" where NVML
// says "NVIDIA H100 80GB HBM3".
var vendorWords = []string{"NVIDIA", "AMD", "INTEL", "TESLA", "GEFORCE", "RADEON", "INSTINCT", "QUADRO"}

// CardTokens splits a card name into its normalised tokens (see
// CardMatches).
func CardTokens(name string) []string {
	raw := strings.FieldsFunc(strings.ToUpper(name), func(r rune) bool {
		return !('A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	})
	out := make([]string, 0, len(raw)+1)
	for i := 0; i < len(raw); i++ {
		t := raw[i]
		switch {
		case slices.Contains(vendorWords, t):
			continue
		case isNumber(t) && i+1 < len(raw) && (raw[i+1] == "GB" || raw[i+1] == "G"):
			t += "GB"
			i++
		case len(t) > 1 && t[len(t)-1] == 'G' && isNumber(t[:len(t)-1]):
			t += "B"
		case len(t) > 3 && (strings.HasPrefix(t, "RTX") || strings.HasPrefix(t, "GTX")) && isNumber(t[3:]):
			out = append(out, t[:3])
			t = t[3:]
		}
		out = append(out, t)
	}
	return out
}

func isNumber(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func isMemoryToken(t string) bool {
	return len(t) > 2 && strings.HasSuffix(t, "GB") && isNumber(t[:len(t)-2])
}

// cardFamilies are the accelerator families a job may name. A family is
// written as its tokens; a requirement names a known card when it holds
// every token of some family.
var cardFamilies = []string{
	"B100", "B200", "GB200", "H100", "H200", "H800", "GH200", "A100", "A800", "A40", "A30", "A10", "A10G",
	"A16", "A2", "L40", "L40S", "L20", "L4", "T4", "V100", "P100", "P40", "P4", "K80", "M60",
	"A4000", "A5000", "A6000", "RTX 3090", "RTX 4090", "RTX 5090", "RTX 6000",
	"MI100", "MI210", "MI250", "MI250X", "MI300A", "MI300X", "MI325X", "GAUDI2", "GAUDI3",
}

var familyTokens = func() [][]string {
	out := make([][]string, len(cardFamilies))
	for i, f := range cardFamilies {
		out[i] = CardTokens(f)
	}
	return out
}()

// CardFamilies lists the card families CheckCard knows, sorted.
func CardFamilies() []string {
	out := slices.Clone(cardFamilies)
	slices.Sort(out)
	return out
}

// CheckCard refuses a card requirement that names no known family, listing
// the families: a typo such as "X100" would otherwise match no offer and
// leave the job waiting for capacity that never comes.
func CheckCard(requirement string) error {
	tokens := CardTokens(requirement)
	for _, f := range familyTokens {
		if tokensWithin(f, tokens) {
			return nil
		}
	}
	return fmt.Errorf("unknown card %q; known families: %s", requirement, strings.Join(CardFamilies(), ", "))
}

// cardNamesMemory reports whether a card name carries a memory token, such
// as "A100-80GB", as CardTokens would find it. It is called for every
// offer, so it scans the name without allocating.
func cardNamesMemory(name string) bool {
	var prevNumber bool // the previous token is all digits
	for i := 0; i < len(name); {
		if !isAlnum(name[i]) {
			i++
			continue
		}
		j := i
		for j < len(name) && isAlnum(name[j]) {
			j++
		}
		t := name[i:j]
		if prevNumber && (strings.EqualFold(t, "G") || strings.EqualFold(t, "GB")) {
			return true
		}
		digits := 0
		for digits < len(t) && '0' <= t[digits] && t[digits] <= '9' {
			digits++
		}
		if digits > 0 && (strings.EqualFold(t[digits:], "G") || strings.EqualFold(t[digits:], "GB")) {
			return true
		}
		prevNumber = digits == len(t)
		i = j
	}
	return false
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
