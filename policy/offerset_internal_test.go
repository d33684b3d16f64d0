package policy

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestConstWordsFindsOnlyItsWords checks the branch-free comparison
// against every word with one byte changed, cut or added.
func TestConstWordsFindsOnlyItsWords(t *testing.T) {
	t.Parallel()
	words := []string{string(Available), string(Scarce), string(AvailabilityUnknown), string(Unavailable), "abcdefghijkl"}
	c := newConstWords(words...)
	for i, w := range words {
		if got := c.find(w); got != i {
			t.Errorf("find(%q) = %d, want %d", w, got, i)
		}
		near := []string{w[1:], w[:len(w)-1], w + "x", "x" + w}
		for k := range len(w) {
			b := []byte(w)
			b[k] ^= 0x20
			near = append(near, string(b))
		}
		for _, s := range near {
			if got := c.find(s); got >= 0 && words[got] != s {
				t.Errorf("find(%q) = %d (%q)", s, got, words[got])
			}
		}
	}
	for _, s := range []string{"", "a", "abc", "\x00\x00\x00\x00\x00", "abcdefghijklm"} {
		if got := c.find(s); got != -1 {
			t.Errorf("find(%q) = %d, want -1", s, got)
		}
	}
}

// TestNameTableAgreesWithMapProperty checks ids against a map, for names
// of every length around the eight bytes compared as one word.
func TestNameTableAgreesWithMapProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		var table nameTable
		ids := map[string]int32{}
		for _, name := range rapid.SliceOf(rapid.StringMatching(`[ab\x00]{0,18}`)).Draw(t, "names") {
			want, seen := ids[name]
			if !seen {
				want = int32(len(ids))
				ids[name] = want
			}
			got, gotSeen := table.id(name)
			if got != want || gotSeen != seen {
				t.Fatalf("id(%q) = %d, %v; want %d, %v", name, got, gotSeen, want, seen)
			}
		}
		for _, name := range []string{"", "a", "ab", "abababab", "abababab\x00", "b\x00b\x00b\x00b\x00b\x00"} {
			want, seen := ids[name]
			if got, ok := table.lookup(name); ok != seen || ok && got != want {
				t.Fatalf("lookup(%q) = %d, %v; want %d, %v", name, got, ok, want, seen)
			}
		}
	})
}

// TestNewOfferSetMatchesOnePassProperty checks that preparing a set in
// two goroutines' chunks gives the facts and ids of one pass over it,
// however far the second goroutine got.
func TestNewOfferSetMatchesOnePassProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		offers := make([]Offer, rapid.IntRange(1, 5*chunkOffers).Draw(t, "offers"))
		names := func(prefix string, n int) []string {
			out := make([]string, n)
			for i := range out {
				out[i] = fmt.Sprintf("%s%d", prefix, i)
			}
			return out
		}
		providers, regions := names("p", 12), names("region-of-many-bytes-", 30)
		cards := []string{"H100", "A100", "A100-80GB", "L4", "cpu", ""}
		for i := range offers {
			offers[i] = Offer{
				Provider: providers[rapid.IntRange(0, len(providers)-1).Draw(t, "provider")],
				Pool:     fmt.Sprintf("pool-%d", i), Region: regions[rapid.IntRange(0, len(regions)-1).Draw(t, "region")],
				Country: rapid.SampledFrom([]string{"DE", "US", "", "de"}).Draw(t, "country"),
				Card:    rapid.SampledFrom(cards).Draw(t, "card"), GPUMemoryGB: rapid.SampledFrom([]int{0, 40, 80}).Draw(t, "mem"),
				GPUCount: 1, Tier: rapid.SampledFrom([]Tier{TierSpot, TierOnDemand}).Draw(t, "tier"),
				PricePerHour: Money{Micros: 1, Currency: rapid.SampledFrom([]string{"EUR", "USD", "GBP"}).Draw(t, "currency")},
			}
			if rapid.Bool().Draw(t, "has_rate") {
				offers[i].PreemptionRate = ptrTo(rapid.Float64Range(0, 1).Draw(t, "rate"))
			}
		}
		want := &OfferSet{offers: offers, facts: make([]offerFacts, len(offers))}
		want.prepare(0, len(offers))

		// The second goroutine's part, prepared from its end chunk by chunk.
		split := rapid.IntRange(0, len(offers)/chunkOffers).Draw(t, "split") * chunkOffers
		got := &OfferSet{offers: offers, facts: make([]offerFacts, len(offers))}
		got.prepare(0, split)
		back := &OfferSet{offers: offers, facts: got.facts}
		for lo := (len(offers) - 1) / chunkOffers * chunkOffers; lo >= split; lo -= chunkOffers {
			back.prepare(lo, min(lo+chunkOffers, len(offers)))
		}
		got.merge(back, split)
		sameSets(t, got, want)
		sameSets(t, NewOfferSet(offers), want)
	})
}

func sameSets(t *rapid.T, got, want *OfferSet) {
	if !slices.Equal(got.facts, want.facts) {
		for i := range got.facts {
			if got.facts[i] != want.facts[i] {
				t.Fatalf("offer %d: facts %+v, want %+v", i, got.facts[i], want.facts[i])
			}
		}
	}
	for _, c := range []struct {
		what      string
		got, want []string
	}{
		{"providers", got.providers.names, want.providers.names},
		{"regions", got.regions.names, want.regions.names},
		{"card names", got.cardNames.names, want.cardNames.names},
		{"currencies", got.currencies.names, want.currencies.names},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Fatalf("%s %q, want %q", c.what, c.got, c.want)
		}
	}
	if !slices.Equal(got.cards.names, want.cards.names) || got.maxRate != want.maxRate {
		t.Fatalf("cards %v, max rate %v; want %v, %v", got.cards.names, got.maxRate, want.cards.names, want.maxRate)
	}
}
