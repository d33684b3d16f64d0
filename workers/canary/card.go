package canary

import (
	"regexp"
	"slices"
	"strings"
)

// CardMatches reports whether a device name reported by NVML satisfies a
// pool's card requirement. Both are split into upper-case tokens at every
// character that is not a letter or digit, a number followed by a separate
// "GB" token is joined with it ("80 GB" → "80GB", "80G" → "80GB"), and the
// requirement matches when each of its tokens is one of the name's tokens.
//
// So "NVIDIA H100 80GB HBM3" matches H100 and H100-80GB; "NVIDIA
// A100-SXM4-80GB" matches A100-80GB and A100-SXM4 but not A100-40GB; L40
// does not match "NVIDIA L40S", and H100-SXM does not match "NVIDIA H100 80GB
// HBM3" because that name does not say SXM. Require more tokens to be stricter.
func CardMatches(deviceName, card string) bool {
	want := cardTokens(card)
	if len(want) == 0 {
		return false
	}
	have := cardTokens(deviceName)
	for _, t := range want {
		if !slices.Contains(have, t) {
			return false
		}
	}
	return true
}

var (
	tokenSplit  = regexp.MustCompile(`[^A-Z0-9]+`)
	memoryToken = regexp.MustCompile(`^([0-9]+)G(B)?$`)
	numberToken = regexp.MustCompile(`^[0-9]+$`)
)

// cardTokens splits a card name into its normalised tokens.
func cardTokens(name string) []string {
	raw := tokenSplit.Split(strings.ToUpper(name), -1)
	out := make([]string, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		t := raw[i]
		if t == "" {
			continue
		}
		if numberToken.MatchString(t) && i+1 < len(raw) && (raw[i+1] == "GB" || raw[i+1] == "G") {
			t += "GB"
			i++
		} else if m := memoryToken.FindStringSubmatch(t); m != nil {
			t = m[1] + "GB"
		}
		out = append(out, t)
	}
	return out
}
