package policy

import (
	"fmt"
	"strings"
)

// prepareInputs finds, once per decision, where each of the job's inputs
// is stored and what moving a GB of it out costs there. Cloud egress is
// billed by the provider and region that hold the data, so the price is the
// source's: an entry of Rules.EgressPrices, or else the highest egress
// price that the source provider's offers in that region state. The
// destination's egress price never applies, and receiving data is free.
func (p *placer) prepareInputs() {
	s := p.set
	n := len(p.job.Inputs)
	p.inputRegions, p.inputProviders, p.inputPrice = make([]int32, n), make([]int32, n), make([]int64, n)
	for k, in := range p.job.Inputs {
		region, ok := s.regions.lookup(in.Region)
		if !ok {
			region = -1
		}
		provider := int32(-2)
		if in.Provider != "" {
			if provider, ok = s.providers.lookup(in.Provider); !ok {
				provider = -1
			}
		}
		p.inputRegions[k], p.inputProviders[k] = region, provider
		p.inputPrice[k] = p.sourcePrice(in, region, provider)
	}
	p.outCost = make([]float64, len(s.regions.names))
	for r := range p.outCost {
		for k, in := range p.job.Inputs {
			// An input that names its provider may leave that provider
			// for an offer in its own region: the bound counts it.
			if p.inputPrice[k] <= 0 || p.inputRegions[k] == int32(r) && p.inputProviders[k] == -2 {
				continue
			}
			p.outCost[r] += float64(max(in.Bytes, 0)) / bytesPerGB * float64(p.inputPrice[k])
		}
	}
}

// sourcePrice is the egress price of input in, stored in the set's region
// and provider ids given (-1 when absent from the set, provider -2 when the
// input names none), in base micros per GB; -1 when unknown.
func (p *placer) sourcePrice(in Input, region, provider int32) int64 {
	for i, e := range p.rules.EgressPrices {
		if (in.Provider == "" || matchAny([]string{e.Provider}, in.Provider) || e.Provider == "") &&
			(e.Region == "" || matchAny([]string{e.Region}, in.Region)) {
			return p.rules.egress[i]
		}
	}
	if region < 0 || provider == -1 {
		return -1
	}
	price := int64(-1)
	for _, i := range p.set.offersIn(region) {
		if f := &p.set.facts[i]; provider >= 0 && f.provider != provider {
			continue
		}
		if e := p.set.offers[i].EgressPerGB; e != nil {
			if v, ok := p.rules.rates.toBase(*e); ok {
				price = max(price, v)
			}
		}
	}
	return price
}

// local reports whether input k is stored where offer f runs: in its
// region and, when the input names its provider, at its provider.
func (p *placer) local(k int, f *offerFacts) bool {
	return p.inputRegions[k] == f.region && (p.inputProviders[k] == -2 || p.inputProviders[k] == f.provider)
}

// checkInputs compares where each input is stored with the job's residency.
// An input outside it, or in a country nobody states, is a note on the
// decision, or an error when a matching rule requires resident inputs.
func (p *placer) checkInputs() (notes []string, err error) {
	if !p.restricted {
		return nil, nil
	}
	for k, in := range p.job.Inputs {
		country, _ := NormalizeCountry(in.Country)
		if country == "" {
			country = p.inputCountry(k)
		}
		var problem string
		switch {
		case country == "":
			problem = fmt.Sprintf("is stored in region %s, whose country neither the input nor any offer states: it cannot be shown to be inside residency %s", in.Region, p.residency.Class)
		case !p.allowed.has(country):
			problem = fmt.Sprintf("is stored in region %s (%s), outside residency %s", in.Region, country, p.residency.Class)
		default:
			continue
		}
		name := in.Name
		if name == "" {
			name = fmt.Sprintf("inputs[%d]", k)
		}
		if len(p.residentBy) > 0 {
			return nil, fmt.Errorf("job.inputs[%d]: input %s %s; rule %s requires inputs inside the residency", k, name, problem, strings.Join(p.residentBy, ", "))
		}
		notes = append(notes, "input "+name+" "+problem)
	}
	return notes, nil
}

// inputCountry is the country the offers in input k's region (at its
// provider, when it names one) state, or "".
func (p *placer) inputCountry(k int) string {
	region, provider := p.inputRegions[k], p.inputProviders[k]
	if region < 0 || provider == -1 {
		return ""
	}
	for _, i := range p.set.offersIn(region) {
		f := &p.set.facts[i]
		if (provider < 0 || f.provider == provider) && f.country >= 0 {
			c := int32(f.country)
			return string([]byte{byte('A' + c/26), byte('A' + c%26)})
		}
	}
	return ""
}
