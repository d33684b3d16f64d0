package adapters

import "github.com/gpuq/gpuq/policy"

// CardMatches reports whether a card name, as an offer or NVML states it,
// satisfies a card requirement. It is placement's rule (policy.CardMatches),
// here for the worker's canary, which checks the card a pool's machine
// really has by the same names the job was placed by.
func CardMatches(name, requirement string) bool { return policy.CardMatches(name, requirement) }

// CardTokens splits a card name into the normalised tokens CardMatches
// compares (policy.CardTokens).
func CardTokens(name string) []string { return policy.CardTokens(name) }
