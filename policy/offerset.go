package policy

import (
	"math"
	"sync"
	"time"
)

// OfferSet is a snapshot of offers prepared for placing many jobs. Each
// offer is validated once and its names (provider, region, card,
// currencies) become small ids, so a decision over the set compares numbers
// rather than strings. A set is read-only once made: any number of
// decisions may use it at the same time. The offers slice is kept, not
// copied, and must not be modified while the set is in use.
type OfferSet struct {
	offers    []Offer
	facts     []offerFacts
	providers intern[string]
	regions   intern[string]
	cardNames intern[string]
	cards     intern[cardKey]
	// namesMemory says, by card name id, whether the name carries its
	// memory ("A100-80GB").
	namesMemory []bool
	currencies  intern[string]
	// maxRate is the highest preemption rate a spot offer states: it
	// bounds the cost of every offer at once.
	maxRate float64
	// inRegion lists the valid offers of each region id, made the first
	// time a job's inputs ask where their data is.
	inRegionOnce sync.Once
	inRegion     [][]int32
}

// offerFacts is what placement reads of one offer: 48 bytes and no
// pointers, so that checking ten thousand offers walks one compact array
// that the collector never scans.
type offerFacts struct {
	invalid bool
	spot    bool
	gpu     bool // Offer.HasGPU
	// rateKnown is false when the offer states no preemption rate.
	rateKnown bool
	// huge is true when a resource count does not fit the uint16 fields
	// below; checks then read the offer itself.
	huge     bool
	avail    uint8 // Availability.rank
	country  int16 // countryIndex, or -1 when unknown
	priceCur int16 // currency id
	// provider, region and card are ids in the set; card stands for the
	// card's name, and its memory when the name does not say it.
	provider, region, card            int32
	gpuCount, gpuMemory, vcpu, memory uint16
	price                             int64 // micros in their own currency
	rate                              float64
}

// Positions of an offer's attributes, for finding reasons by them; see
// attr and explain.
const (
	attrProvider = iota
	attrRegion
	attrCard
	attrCountry
	attrSpot // 1 for spot, 0 for on-demand
	// The counts are -1 when huge.
	attrGPUCount
	attrGPUMemory
	attrVCPU
	attrMemory
)

// attr is the offer's attribute at position pos.
func (f *offerFacts) attr(pos uint8) int32 {
	switch pos {
	case attrProvider:
		return f.provider
	case attrRegion:
		return f.region
	case attrCard:
		return f.card
	case attrCountry:
		return int32(f.country)
	case attrSpot:
		return int32(flag(f.spot, 1))
	}
	if f.huge {
		return -1
	}
	switch pos {
	case attrGPUCount:
		return int32(f.gpuCount)
	case attrGPUMemory:
		return int32(f.gpuMemory)
	case attrVCPU:
		return int32(f.vcpu)
	case attrMemory:
		return int32(f.memory)
	}
	panic("policy: unknown offer attribute")
}

// NewOfferSet prepares offers for placement.
func NewOfferSet(offers []Offer) *OfferSet {
	s := &OfferSet{offers: offers, facts: make([]offerFacts, len(offers))}
	for i := range offers {
		o, f := &offers[i], &s.facts[i]
		country, ok := countryIndex(o.Country)
		avail := o.Availability.rank()
		if !o.valid(ok, avail) {
			f.invalid = true
			continue
		}
		if !ok {
			country = -1
		}
		f.spot, f.avail, f.country = o.Tier == TierSpot, uint8(avail), int16(country)
		f.provider, _ = s.providers.id(o.Provider, hashName(o.Provider))
		f.region, _ = s.regions.id(o.Region, hashName(o.Region))
		name, seen := s.cardNames.id(o.Card, hashName(o.Card))
		if !seen {
			s.namesMemory = append(s.namesMemory, cardNamesMemory(o.Card))
		}
		card := cardKey{name: name, memGB: -1}
		if !s.namesMemory[name] {
			card.memGB = int64(o.GPUMemoryGB)
		}
		f.card, _ = s.cards.id(card, card.hash())
		f.gpu = o.HasGPU()
		f.priceCur = s.currency(o.PricePerHour.Currency)
		f.price = o.PricePerHour.Micros
		if o.PreemptionRate != nil {
			f.rate, f.rateKnown = *o.PreemptionRate, true
			if f.spot {
				s.maxRate = max(s.maxRate, f.rate)
			}
		}
		f.huge = max(o.GPUCount, o.GPUMemoryGB, o.VCPU, o.MemoryGB) > math.MaxUint16
		if !f.huge {
			f.gpuCount, f.gpuMemory, f.vcpu, f.memory = uint16(o.GPUCount), uint16(o.GPUMemoryGB), uint16(o.VCPU), uint16(o.MemoryGB)
		}
	}
	return s
}

// currency returns the id of a currency code. A set holds a handful of
// currencies, so comparing the three letters with each beats hashing them.
func (s *OfferSet) currency(code string) int16 {
	for id, c := range s.currencies.names {
		if c == code {
			return int16(id)
		}
	}
	id, _ := s.currencies.id(code, hashName(code))
	return int16(id)
}

// offersIn returns the indexes of the valid offers in region id r.
func (s *OfferSet) offersIn(r int32) []int32 {
	s.inRegionOnce.Do(func() {
		s.inRegion = make([][]int32, len(s.regions.names))
		for i := range s.facts {
			if f := &s.facts[i]; !f.invalid {
				s.inRegion[f.region] = append(s.inRegion[f.region], int32(i))
			}
		}
	})
	return s.inRegion[r]
}

// Len is the number of offers in the set.
func (s *OfferSet) Len() int { return len(s.offers) }

// Place decides where job should run among the set's offers, as Place does.
func (s *OfferSet) Place(job Requirements, rules Rules, now time.Time) (Decision, error) {
	p, err := s.placer(job, rules, now)
	if err != nil {
		return Decision{}, err
	}
	return p.place(1)
}

// placer checks rules and job and prepares one decision over the set.
func (s *OfferSet) placer(job Requirements, rules Rules, now time.Time) (*placer, error) {
	c, err := compile(rules)
	if err != nil {
		return nil, err
	}
	return newPlacer(job, c, s, now)
}
