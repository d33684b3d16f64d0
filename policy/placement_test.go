package policy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/policy"
	"pgregory.net/rapid"
)

// offer is an available on-demand offer in Germany; edit changes it.
func offer(pool, card string, gpus, memGB int, price string, edit ...func(*policy.Offer)) policy.Offer {
	o := policy.Offer{
		Provider: "hetzner", Pool: pool, Region: "fsn1", Country: "DE", Card: card, GPUCount: gpus, GPUMemoryGB: memGB,
		VCPU: 32, MemoryGB: 256, Tier: policy.TierOnDemand, PricePerHour: money(price), Availability: policy.Available,
	}
	for _, e := range edit {
		e(&o)
	}
	return o
}

// outcome is what a user reads of a decision: the chosen pool and plan B,
// or the refusal.
func outcome(d policy.Decision, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	pools := []string{d.Chosen.Offer.Pool}
	for _, a := range d.Alternatives {
		pools = append(pools, a.Offer.Pool)
	}
	return strings.Join(pools, " > ")
}

func TestJobsNameCardsByFamilySizeAnyCaseAndVendor(t *testing.T) {
	t.Parallel()
	offers := []policy.Offer{
		offer("a100-40", "A100-40GB", 1, 40, "1.00 EUR"),
		offer("a100-80", "A100-SXM4-80GB", 1, 80, "1.50 EUR"),
		offer("a100-bare-80", "A100", 1, 80, "1.60 EUR"),
		offer("h100", "NVIDIA H100 80GB HBM3", 1, 80, "2.00 EUR"),
		offer("l40s", "L40S", 1, 48, "0.90 EUR"),
	}
	tests := []struct {
		name  string
		cards []string
		memGB int
		want  string
	}{
		{"a family matches every size", []string{"A100"}, 0, "a100-40 > a100-80 > a100-bare-80"},
		{"a size narrows the family", []string{"A100-80GB"}, 0, "a100-80 > a100-bare-80"},
		{"case does not matter", []string{"h100"}, 0, "h100"},
		{"vendor prefixes do not matter", []string{"NVIDIA H100"}, 0, "h100"},
		{"memory_gb still applies to a family", []string{"A100"}, 80, "a100-80 > a100-bare-80"},
		{"L40 is not L40S", []string{"L40"}, 0, "error: no placement among 5 offers: 5 offers with cards other than L40; relaxing resources.gpu.cards would make 5 offers feasible"},
		{"preference orders equal prices", []string{"h100", "A100-80GB"}, 0, "a100-80 > a100-bare-80 > h100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := policy.Requirements{GPUCount: 1, Cards: tt.cards, MinGPUMemoryGB: tt.memGB}
			if got := outcome(policy.Place(job, offers, policy.Rules{}, now)); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	t.Run("the rejection names the card and the size it has", func(t *testing.T) {
		t.Parallel()
		job := policy.Requirements{GPUCount: 1, Cards: []string{"A100-80GB"}}
		d, _ := policy.Place(job, offers[:1], policy.Rules{}, now)
		if got := d.ReasonsOf(d.Rejected()[0]); got[0].Message != "card A100-40GB not accepted (A100-80GB)" {
			t.Errorf("reasons = %+v", got)
		}
	})
}

func TestCPUOnlyJobsRunOnCPUPoolsAndUseGPUPoolsOnlyAsPlanB(t *testing.T) {
	t.Parallel()
	cpu := offer("cpu-eu", "cpu", 0, 0, "0.40 EUR")
	t4 := offer("t4-eu", "T4", 1, 16, "0.40 EUR")
	cheapT4 := offer("t4-cheap", "T4", 1, 16, "0.30 EUR")
	bigCPU := offer("cpu-big", "cpu", 0, 0, "0.50 EUR")
	tests := []struct {
		name   string
		offers []policy.Offer
		allow  bool
		rule   bool
		want   string
	}{
		{"equal prices: the CPU pool, not the GPU pool's name", []policy.Offer{t4, cpu}, false, false, "cpu-eu"},
		{"a cheaper GPU pool does not take CPU work", []policy.Offer{cheapT4, cpu}, false, false, "cpu-eu"},
		{"allowed: GPU pools rank after every CPU pool", []policy.Offer{cheapT4, bigCPU, cpu}, true, false, "cpu-eu > cpu-big > t4-cheap"},
		{"an org rule may allow it", []policy.Offer{cheapT4, cpu}, false, true, "cpu-eu > t4-cheap"},
		{"allowed and no CPU pool: the GPU pool", []policy.Offer{t4}, true, false, "t4-eu"},
		{"not allowed and no CPU pool: refused, naming the switch", []policy.Offer{t4}, false, false,
			"error: no placement among 1 offer: 1 offer in GPU pools kept for GPU jobs; relaxing placement.allow_gpu_for_cpu would make 1 offer feasible"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := policy.Requirements{Project: "etl", VCPU: 8, AllowGPUForCPU: tt.allow}
			var rules policy.Rules
			if tt.rule {
				rules.Rules = []policy.Rule{{Name: "spare-gpus", Project: "etl", AllowGPUForCPU: true}}
			}
			if got := outcome(policy.Place(job, tt.offers, rules, now)); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	t.Run("a GPU pool chosen as plan B says so", func(t *testing.T) {
		t.Parallel()
		d, err := policy.Place(policy.Requirements{AllowGPUForCPU: true}, []policy.Offer{t4}, policy.Rules{}, now)
		if err != nil || !slices.Contains(d.Notes, "CPU-only job placed on GPU pool t4-eu as plan B (allowed by job): no CPU pool is feasible") {
			t.Errorf("notes = %q, err %v", d.Notes, err)
		}
	})
}

func TestEgressIsPricedWhereTheInputIsStored(t *testing.T) {
	t.Parallel()
	// 1 TB in AWS us-east-1, which bills 0.09 USD per GB out.
	aws := offer("aws-use1", "H100", 1, 80, "3.00 USD", func(o *policy.Offer) {
		o.Provider, o.Region, o.Country, o.EgressPerGB = "aws", "us-east-1", "US", ptr(money("0.09 USD"))
	})
	free := offer("free-egress", "H100", 1, 80, "1.00 EUR", func(o *policy.Offer) { o.EgressPerGB = ptr(money("0 EUR")) })
	pricey := offer("pricey-egress", "H100", 1, 80, "1.00 EUR", func(o *policy.Offer) { o.Pool, o.EgressPerGB = "pricey-egress", ptr(money("0.50 EUR")) })
	rates := map[string]float64{"USD": 0.92}
	tests := []struct {
		name   string
		input  policy.Input
		offers []policy.Offer
		rules  policy.Rules
		egress map[string]string // pool → egress
	}{
		{"the source's egress, not the destination's zero",
			policy.Input{Provider: "aws", Region: "us-east-1", Bytes: 1e12}, []policy.Offer{aws, free},
			policy.Rules{ExchangeRates: rates}, map[string]string{"free-egress": "82.80 EUR", "aws-use1": "0.00 EUR"}},
		{"the destination's egress price never applies",
			policy.Input{Provider: "aws", Region: "us-east-1", Bytes: 1e12}, []policy.Offer{aws, pricey},
			policy.Rules{ExchangeRates: rates}, map[string]string{"pricey-egress": "82.80 EUR"}},
		{"egress_prices price a source no offer covers",
			policy.Input{Provider: "gcs", Region: "europe-west4", Bytes: 1e12}, []policy.Offer{free},
			policy.Rules{EgressPrices: []policy.EgressPrice{{Provider: "gcs", Region: "europe-*", PerGB: money("0.08 EUR")}}},
			map[string]string{"free-egress": "80.00 EUR"}},
		{"a zero-egress provider's data moves for free",
			policy.Input{Provider: "hetzner", Region: "fsn1", Bytes: 1e12}, []policy.Offer{aws, free},
			policy.Rules{ExchangeRates: rates}, map[string]string{"aws-use1": "0.00 EUR", "free-egress": "0.00 EUR"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := policy.Requirements{GPUCount: 1, Inputs: []policy.Input{tt.input}}
			d, err := policy.Place(job, tt.offers, tt.rules, now)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, c := range append([]policy.Candidate{*d.Chosen}, d.Alternatives...) {
				if _, ok := tt.egress[c.Offer.Pool]; ok {
					got[c.Offer.Pool] = c.Cost.Egress.String()
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.egress) {
				t.Errorf("egress %v, want %v", got, tt.egress)
			}
		})
	}
	t.Run("1 TB out of us-east-1 makes the 0-egress offer lose", func(t *testing.T) {
		t.Parallel()
		job := policy.Requirements{GPUCount: 1, Inputs: []policy.Input{{Provider: "aws", Region: "us-east-1", Bytes: 1e12}}}
		d, err := policy.Place(job, []policy.Offer{aws, free}, policy.Rules{ExchangeRates: rates}, now)
		if err != nil || d.Chosen.Offer.Pool != "aws-use1" || d.Alternatives[0].Cost.Total.String() != "83.80 EUR" {
			t.Errorf("chose %s, plan B %+v, err %v", d.Chosen.Offer.Pool, d.Alternatives, err)
		}
	})
}

func TestInputsOutsideTheResidencyAreNotedOrRefused(t *testing.T) {
	t.Parallel()
	offers := []policy.Offer{
		offer("fsn", "H100", 1, 80, "2 EUR"),
		offer("use1", "H100", 1, 80, "2 EUR", func(o *policy.Offer) { o.Provider, o.Region, o.Country = "aws", "us-east-1", "US" }),
	}
	tests := []struct {
		name     string
		input    policy.Input
		resident bool
		want     string
	}{
		{"inside: nothing to say", policy.Input{Name: "scans", Region: "fsn1", Bytes: 1}, false, "fsn"},
		{"outside: a note", policy.Input{Name: "scans", Region: "us-east-1", Bytes: 1}, false,
			"fsn; note: input scans is stored in region us-east-1 (US), outside residency EU"},
		{"the input's own country wins", policy.Input{Name: "scans", Region: "us-east-1", Country: "de", Bytes: 1}, true, "fsn"},
		{"outside under a rule requiring resident inputs: refused", policy.Input{Name: "scans", Region: "us-east-1", Bytes: 1}, true,
			"error: job.inputs[0]: input scans is stored in region us-east-1 (US), outside residency EU; rule gdpr requires inputs inside the residency"},
		{"unknown country under that rule: refused", policy.Input{Region: "somewhere", Bytes: 1}, true,
			"error: job.inputs[0]: input inputs[0] is stored in region somewhere, whose country neither the input nor any offer states: it cannot be shown to be inside residency EU; rule gdpr requires inputs inside the residency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := policy.Requirements{Project: "med", GPUCount: 1, Inputs: []policy.Input{tt.input}}
			rules := policy.Rules{Rules: []policy.Rule{{Name: "gdpr", Project: "med", Residency: "EU", ResidentInputs: tt.resident}}}
			d, err := policy.Place(job, offers, rules, now)
			got := outcome(d, err)
			for _, n := range d.Notes {
				got += "; note: " + n
			}
			if got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestOffersAreValidatedAsASet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		offers  []policy.Offer
		want    string
		country string // of offers[0] after a success
	}{
		{"a lower-case country is normalised", []policy.Offer{offer("a", "H100", 1, 80, "1 EUR", func(o *policy.Offer) { o.Country = "de" })}, "", "DE"},
		{"a country that is not a code is refused naming the field", []policy.Offer{offer("a", "H100", 1, 80, "1 EUR"), offer("b", "H100", 1, 80, "1 EUR", func(o *policy.Offer) { o.Country = "Germany" })},
			`offers[1].country: want an ISO 3166-1 alpha-2 code such as DE, got "Germany"`, ""},
		{"duplicate pool ids name both entries", []policy.Offer{
			offer("eu-h100", "H100", 1, 80, "1 EUR"), offer("b", "H100", 1, 80, "1 EUR"),
			offer("eu-h100", "H100", 1, 80, "1 EUR", func(o *policy.Offer) { o.Provider, o.Region, o.Country = "aws", "us-east-1", "US" })},
			`offers[0].pool and offers[2].pool: both are "eu-h100" (hetzner fsn1 DE and aws us-east-1 US); a pool id must name one pool`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := policy.NormalizeOffers(tt.offers)
			if fmt.Sprint(err) != cmpOr(tt.want, "<nil>") {
				t.Fatalf("err = %v, want %s", err, tt.want)
			}
			if err == nil && tt.offers[0].Country != tt.country {
				t.Errorf("country = %q, want %q", tt.offers[0].Country, tt.country)
			}
		})
	}
	t.Run("placement refuses a country it cannot read instead of treating it as unknown", func(t *testing.T) {
		t.Parallel()
		_, err := policy.Place(policy.Requirements{GPUCount: 1}, []policy.Offer{offer("a", "H100", 1, 80, "1 EUR", func(o *policy.Offer) { o.Country = "de" })}, policy.Rules{}, now)
		var refusal *policy.NoPlacementError
		if !errors.As(err, &refusal) || !strings.Contains(err.Error(), "1 offer malformed") ||
			refusal.Decision.ReasonsOf(refusal.Decision.Rejected()[0])[0].Message != `invalid offer: country: want an upper-case ISO 3166-1 alpha-2 code such as DE, got "de"` {
			t.Errorf("err = %v", err)
		}
	})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestDisjointResidencyClassesSayTheyShareNoCountry(t *testing.T) {
	t.Parallel()
	job := policy.Requirements{Project: "x", GPUCount: 1, Residency: "CH"}
	rules := policy.Rules{Rules: []policy.Rule{{Name: "eea-only", Residency: "EEA"}}}
	d, err := policy.Place(job, []policy.Offer{offer("zrh", "H100", 1, 80, "1 EUR", func(o *policy.Offer) { o.Country = "CH" })}, rules, now)
	want := "no placement among 1 offer: 1 offer outside residency EEA∩CH (EEA and CH share no country); relaxing residency EEA∩CH (rule eea-only, job; EEA and CH share no country) would make 1 offer feasible"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant  %s", err, want)
	}
	if !slices.Contains(d.Notes, "residency EEA∩CH required by rule eea-only and job is empty: EEA and CH share no country, so no offer can be inside it") {
		t.Errorf("notes = %q", d.Notes)
	}
}

// A CPU-only job that did not allow GPU pools never lands on one while a
// CPU pool is feasible, and one that did ranks every CPU pool first.
func TestCPUOnlyJobNeverLandsOnAGPUPoolProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		job, offers, rules := genJob(t), genOffers(t), genRules(t)
		job.GPUCount, job.Cards, job.MinGPUMemoryGB = 0, nil, 0
		job.AllowGPUForCPU = rapid.Bool().Draw(t, "allow")
		d, err := policy.Place(job, offers, rules, now)
		if err != nil {
			return
		}
		kept := append([]policy.Candidate{*d.Chosen}, d.Alternatives...)
		for i, c := range kept {
			if c.Offer.HasGPU() && !job.AllowGPUForCPU {
				t.Fatalf("CPU-only job placed on GPU pool %s (rank %d)", c.Offer.Pool, i+1)
			}
			if i > 0 && !c.Offer.HasGPU() && kept[i-1].Offer.HasGPU() {
				t.Fatalf("CPU pool %s ranked after GPU pool %s", c.Offer.Pool, kept[i-1].Offer.Pool)
			}
		}
	})
}

// An input's estimated egress is the same whatever egress price the
// destination states.
func TestInputEgressNeverDependsOnTheDestinationsEgressPriceProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		job, offers, rules := genJob(t), genOffers(t), genRules(t)
		job.Inputs = []policy.Input{{Provider: rapid.SampledFrom([]string{"", "aws"}).Draw(t, "input_provider"), Region: "r1", Bytes: rapid.Int64Range(1, 2e12).Draw(t, "bytes")}}
		rules.MaxAlternatives = 1000
		before, err := policy.Place(job, offers, rules, now)
		if err != nil {
			return
		}
		// Change the egress price of every offer that does not hold the
		// input: none of them is where the data is billed.
		changed := slices.Clone(offers)
		for i := range changed {
			if changed[i].Region != "r1" && rapid.Bool().Draw(t, "change") {
				changed[i].EgressPerGB = ptr(genMoney(t, "new_egress", 1_000_000))
			}
		}
		after, err := policy.Place(job, changed, rules, now)
		if err != nil {
			t.Fatalf("changing destination egress prices refused the job: %v", err)
		}
		egress := func(d policy.Decision) map[string]policy.Money {
			m := map[string]policy.Money{}
			for _, c := range append([]policy.Candidate{*d.Chosen}, d.Alternatives...) {
				m[c.Offer.Pool] = c.Cost.Egress
			}
			return m
		}
		if b, a := egress(before), egress(after); fmt.Sprint(b) != fmt.Sprint(a) {
			t.Fatalf("egress before %v, after %v", b, a)
		}
	})
}

// The compact form counts every rejection under each of its reasons and
// words its examples as the full decision does.
func TestCompactCountsEveryReasonAndWordsItsExamplesProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		job, offers, rules := genJob(t), genOffers(t), genRules(t)
		d, err := policy.Place(job, offers, rules, now)
		if refusal := (*policy.NoPlacementError)(nil); errors.As(err, &refusal) {
			d = refusal.Decision
		} else if err != nil {
			t.Fatal(err)
		}
		c := d.Compact(3, 2) // before anything is worded
		counts := map[policy.ReasonCode]int{}
		messages := map[int]map[policy.ReasonCode]string{}
		for _, r := range d.Rejected() {
			messages[r.Offer] = map[policy.ReasonCode]string{}
			for _, reason := range d.ReasonsOf(r) {
				counts[reason.Code]++
				messages[r.Offer][reason.Code] = reason.Message
			}
		}
		if c.Rejected != len(d.Rejected()) || c.Offers != len(offers) || len(c.Alternatives) > 3 {
			t.Fatalf("compact %d rejected of %d offers, %d alternatives", c.Rejected, c.Offers, len(c.Alternatives))
		}
		if len(c.Reasons) != len(counts) {
			t.Fatalf("compact tallies %d codes, decision has %d", len(c.Reasons), len(counts))
		}
		for _, tally := range c.Reasons {
			if tally.Offers != counts[tally.Code] || len(tally.Examples) != min(2, tally.Offers) {
				t.Fatalf("tally %+v, want %d offers", tally, counts[tally.Code])
			}
			for _, e := range tally.Examples {
				if e.Message != messages[e.Offer][tally.Code] {
					t.Fatalf("example %+v, decision says %q", e, messages[e.Offer][tally.Code])
				}
			}
		}
		// A decision read back from JSON compacts the same.
		data, _ := json.Marshal(d)
		var back policy.Decision
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(c)
		b, _ := json.Marshal(back.Compact(3, 2))
		if string(a) != string(b) {
			t.Fatalf("compact of the decision read back\n%s\nwant\n%s", b, a)
		}
	})
}

func TestCompactDecisionOfTenThousandOffersIsKilobytes(t *testing.T) {
	t.Parallel()
	job, offers, rules := benchWorld(10_000, 50)
	d, err := policy.Place(job, offers, rules, now)
	if err != nil {
		t.Fatal(err)
	}
	compact, err := json.Marshal(d.Compact(10, 3))
	if err != nil {
		t.Fatal(err)
	}
	full, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("decision over %d offers: full %d bytes, compact %d bytes", len(offers), len(full), len(compact))
	if len(compact) > 32<<10 || len(full) < 1<<20 {
		t.Errorf("full %d bytes, compact %d bytes: want the compact form under 32 KiB", len(full), len(compact))
	}
}

// A stored compact decision serves Replace as the previous decision: it
// keeps the residency and the version.
func TestCompactDecisionReadsBackAsThePreviousDecision(t *testing.T) {
	t.Parallel()
	job := policy.Requirements{Project: "x", GPUCount: 1, Residency: "EU"}
	offers := []policy.Offer{offer("fsn", "H100", 1, 80, "1 EUR"), offer("use1", "H100", 1, 80, "1 EUR", func(o *policy.Offer) { o.Country = "US" })}
	d, err := policy.Place(job, offers, policy.Rules{}, now)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(d.Compact(10, 3))
	if err != nil {
		t.Fatal(err)
	}
	var previous policy.Decision
	if err := json.Unmarshal(data, &previous); err != nil {
		t.Fatal(err)
	}
	job.Residency = ""
	next, err := policy.Replace(job, offers, policy.Rules{}, previous, policy.History{}, now)
	if err != nil || next.Version != 2 || next.Chosen.Offer.Pool != "fsn" || next.Residency.Class != "EU" {
		t.Errorf("replaced from the compact form: %s v%d, residency %+v, err %v", outcome(next, err), next.Version, next.Residency, err)
	}
}
