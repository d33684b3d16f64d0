package policy

import (
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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
	providers nameTable
	regions   nameTable
	cardNames nameTable
	cards     intern[cardKey]
	// cardNameFacts are by card name id.
	cardNameFacts []cardNameFacts
	currencies    currencyTable
	// maxRate is the highest preemption rate a spot offer states: it
	// bounds the cost of every offer at once.
	maxRate float64
	// inRegion lists the valid offers of each region id, in the order
	// given, made the first time a job's inputs ask where their data is:
	// a decision asks about the few regions its inputs are in.
	inRegion []regionOffers
}

// regionOffers are the offers of one region, listed once.
type regionOffers struct {
	once sync.Once
	list []int32
}

// cardNameFacts is what preparing offers reads of one card name. A set
// holds a handful of names among thousands of offers, so each is read once.
type cardNameFacts struct {
	// namesMemory says whether the name carries its memory ("A100-80GB").
	namesMemory bool
	// gpu says whether the name makes an offer a GPU pool (see
	// Offer.HasGPU): it is neither empty nor "cpu".
	gpu bool
	// card is the card id of the name with memory memGB, as a cardKey
	// has it, for the memory the last offer with this name stated; -1
	// until one did. Offers of one name mostly state one memory.
	card  int32
	memGB int64
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
	s.prepareAll()
	s.inRegion = make([]regionOffers, len(s.regions.names))
	return s
}

// prepareAll prepares every offer. A one-shot Place prepares thousands of
// offers for one decision, and preparing them is most of its time, so a
// second goroutine prepares chunks from the end, with names of its own,
// while this one prepares them from the start; they meet wherever the
// second got to, which is nowhere when no processor was free, and its
// names are then given the ids one pass would have.
func (s *OfferSet) prepareAll() {
	n := len(s.offers)
	chunks := (n + chunkOffers - 1) / chunkOffers
	if chunks < 4 || runtime.GOMAXPROCS(0) < 2 {
		s.prepare(0, n)
		return
	}
	var taken atomic.Int32
	claim := func() bool { return int(taken.Add(1)) <= chunks }
	back := &OfferSet{offers: s.offers, facts: s.facts}
	from := n // the first offer back prepared
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k := chunks - 1; claim(); k-- {
			from = k * chunkOffers
			back.prepare(from, min(from+chunkOffers, n))
		}
	}()
	for k := 0; claim(); k++ {
		s.prepare(k*chunkOffers, min((k+1)*chunkOffers, n))
	}
	<-done
	s.merge(back, from)
}

// chunkOffers is how many offers NewOfferSet's goroutines take at a time.
const chunkOffers = 512

// prepare fills the facts of offers lo to hi, naming in s's tables.
func (s *OfferSet) prepare(lo, hi int) {
	maxRate := math.Float64bits(s.maxRate)
	for i := lo; i < hi; i++ {
		o, f := &s.offers[i], &s.facts[i]
		country, ok := countryIndex(o.Country)
		avail := o.Availability.rank()
		if !o.valid(ok, avail) {
			f.invalid = true
			continue
		}
		if !ok {
			country = -1
		}
		// valid leaves spot and on-demand, which differ in length.
		f.spot, f.avail, f.country = len(o.Tier) == len(TierSpot), uint8(avail), int16(country)
		f.provider, _ = s.providers.id(o.Provider)
		f.region, _ = s.regions.id(o.Region)
		f.card, f.gpu = s.card(o)
		f.priceCur = s.currencies.id(o.PricePerHour.Currency)
		f.price = o.PricePerHour.Micros
		f.rate, f.rateKnown = *orElse(o.PreemptionRate, &noRate), o.PreemptionRate != nil
		// Valid rates are +0 to +Inf once -0 is +0, and those order as
		// their bits do, which compare faster than floats; the rates of
		// on-demand offers count as +0, masked rather than branched on.
		maxRate = max(maxRate, math.Float64bits(f.rate)&^(1<<63)&-uint64(flag(f.spot, 1)))
		f.huge = max(o.GPUCount, o.GPUMemoryGB, o.VCPU, o.MemoryGB) > math.MaxUint16
		if !f.huge {
			f.gpuCount, f.gpuMemory, f.vcpu, f.memory = uint16(o.GPUCount), uint16(o.GPUMemoryGB), uint16(o.VCPU), uint16(o.MemoryGB)
		}
	}
	s.maxRate = math.Float64frombits(maxRate)
}

// merge takes in back, which prepared offers[from:] while s prepared
// those before, giving back's names the ids one pass over the offers would
// have given them: in the order the offers first name them.
func (s *OfferSet) merge(back *OfferSet, from int) {
	unset := func(n int) []int32 {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = -1
		}
		return ids
	}
	providers, regions := unset(len(back.providers.names)), unset(len(back.regions.names))
	names, cards := unset(len(back.cardNames.names)), unset(len(back.cards.names))
	currencies := unset(len(back.currencies.names))
	for i := from; i < len(s.facts); i++ {
		f := &s.facts[i]
		if f.invalid {
			continue
		}
		if providers[f.provider] < 0 {
			providers[f.provider], _ = s.providers.id(back.providers.names[f.provider])
		}
		if regions[f.region] < 0 {
			regions[f.region], _ = s.regions.id(back.regions.names[f.region])
		}
		if cards[f.card] < 0 {
			key := back.cards.names[f.card]
			if names[key.name] < 0 {
				var seen bool
				if names[key.name], seen = s.cardNames.id(back.cardNames.names[key.name]); !seen {
					s.cardNameFacts = append(s.cardNameFacts, back.cardNameFacts[key.name])
				}
			}
			key.name = names[key.name]
			cards[f.card], _ = s.cards.id(key, key.hash())
		}
		if currencies[f.priceCur] < 0 {
			currencies[f.priceCur] = int32(s.currencies.id(back.currencies.names[f.priceCur]))
		}
		f.provider, f.region, f.card = providers[f.provider], regions[f.region], cards[f.card]
		f.priceCur = int16(currencies[f.priceCur])
	}
	s.maxRate = max(s.maxRate, back.maxRate)
}

// card returns the card id of offer o and whether o is a GPU pool.
func (s *OfferSet) card(o *Offer) (int32, bool) {
	name, seen := s.cardNames.id(o.Card)
	if !seen {
		s.cardNameFacts = append(s.cardNameFacts, cardNameFacts{
			namesMemory: cardNamesMemory(o.Card),
			gpu:         o.Card != "" && !strings.EqualFold(o.Card, "cpu"),
			card:        -1,
		})
	}
	c := &s.cardNameFacts[name]
	key := cardKey{name: name, memGB: int64(o.GPUMemoryGB)}
	if c.namesMemory {
		key.memGB = -1
	}
	if c.card < 0 || c.memGB != key.memGB {
		c.card, _ = s.cards.id(key, key.hash())
		c.memGB = key.memGB
	}
	return c.card, o.GPUCount > 0 || c.gpu
}

// currencyTable gives currency codes small dense ids in the order they
// are first seen. A set holds a handful of currencies, and a valid code is
// three letters, so it compares a code with each as one number: which of
// them an offer's price is in is random, and comparing without branching
// on it beats hashing the code.
type currencyTable struct {
	names []string
	codes []uint32 // by id
}

// id returns the id of a valid currency code.
func (t *currencyTable) id(code string) int16 {
	c := uint32(code[0]) | uint32(code[1])<<8 | uint32(code[2])<<16
	id := -1
	for i, known := range t.codes {
		if known == c {
			id = i
		}
	}
	if id < 0 {
		id = len(t.names)
		t.names, t.codes = append(t.names, code), append(t.codes, c)
	}
	return int16(id)
}

// offersIn returns the indexes of the valid offers in region id r.
func (s *OfferSet) offersIn(r int32) []int32 {
	in := &s.inRegion[r]
	in.once.Do(func() {
		for i := range s.facts {
			if f := &s.facts[i]; f.region == r && !f.invalid {
				in.list = append(in.list, int32(i))
			}
		}
	})
	return in.list
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
