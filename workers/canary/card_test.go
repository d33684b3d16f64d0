package canary

import (
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestCardMatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		device, card string
		want         bool
	}{
		{"NVIDIA H100 80GB HBM3", "H100", true},
		{"NVIDIA H100 80GB HBM3", "h100", true},
		{"NVIDIA H100 80GB HBM3", "H100-80GB", true},
		{"NVIDIA H100 80GB HBM3", "H100 80 GB", true},
		{"NVIDIA H100 80GB HBM3", "H100-SXM", false},
		{"NVIDIA H100 PCIe", "H100", true},
		{"NVIDIA A100-SXM4-80GB", "A100-80GB", true},
		{"NVIDIA A100-SXM4-80GB", "A100-SXM4", true},
		{"NVIDIA A100 80GB PCIe", "A100-80GB", true},
		{"NVIDIA A100-SXM4-40GB", "A100-80GB", false},
		{"NVIDIA A100-PCIE-40GB", "A100-80GB", false},
		{"NVIDIA A100-SXM4-40GB", "A100", true},
		{"NVIDIA A100-SXM4-40GB", "A100-40G", true},
		{"NVIDIA A100-SXM4-80GB", "H100", false},
		{"NVIDIA L40S", "L40", false},
		{"NVIDIA L40S", "L40S", true},
		{"NVIDIA RTX A1000", "A100", false},
		{"NVIDIA GeForce RTX 4090", "RTX 4090", true},
		{"NVIDIA GeForce RTX 4090", "", false},
		{"NVIDIA GeForce RTX 4090", "--", false},
	}
	for _, tt := range tests {
		if got := CardMatches(tt.device, tt.card); got != tt.want {
			t.Errorf("CardMatches(%q, %q) = %v, want %v", tt.device, tt.card, got, tt.want)
		}
	}
}

// A requirement made of some of a name's own tokens always matches it, and
// naming another memory size never does.
func TestCardMatchesProperties(t *testing.T) {
	t.Parallel()
	word := rapid.StringMatching(`[A-Za-z][A-Za-z0-9]{0,5}`)
	sep := rapid.SampledFrom([]string{" ", "-", "_", "  "})
	rapid.Check(t, func(t *rapid.T) {
		words := rapid.SliceOfN(word, 1, 5).Draw(t, "words")
		memGB := rapid.IntRange(1, 256).Draw(t, "memGB")
		name := "NVIDIA"
		for _, w := range words {
			name += sep.Draw(t, "sep") + w
		}
		name += sep.Draw(t, "sep") + strconv.Itoa(memGB) + "GB"
		picked := rapid.SliceOfNDistinct(rapid.IntRange(0, len(words)-1), 1, len(words), rapid.ID[int]).Draw(t, "picked")
		var req []string
		for _, i := range picked {
			req = append(req, words[i])
		}
		card := strings.Join(req, "-")
		if !CardMatches(name, card) {
			t.Fatalf("CardMatches(%q, %q) = false, want true", name, card)
		}
		other := rapid.IntRange(1, 256).Filter(func(n int) bool { return n != memGB }).Draw(t, "other")
		if CardMatches(name, card+"-"+strconv.Itoa(other)+"GB") {
			t.Fatalf("%q matched a %dGB requirement", name, other)
		}
	})
}
