package canary

import "github.com/gpuq/gpuq/adapters"

// CardMatches reports whether a device name reported by NVML satisfies a
// pool's card requirement, by the card names placement uses
// (adapters.CardMatches, which is policy.CardMatches): both are split into
// upper-case tokens at every character that is not a letter or digit,
// vendor words are dropped, a number followed by "GB" or "G" becomes one
// memory token ("80 GB", "80G" → "80GB"), and the requirement matches when
// each of its tokens is one of the name's tokens.
//
// So "NVIDIA H100 80GB HBM3" matches H100 and H100-80GB; "NVIDIA
// A100-SXM4-80GB" matches A100-80GB and A100-SXM4 but not A100-40GB; L40
// does not match "NVIDIA L40S", and H100-SXM does not match "NVIDIA H100 80GB
// HBM3" because that name does not say SXM. Require more tokens to be stricter.
func CardMatches(deviceName, card string) bool { return adapters.CardMatches(deviceName, card) }
