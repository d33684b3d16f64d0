package sim

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// awsCountries maps the AWS regions the published traces come from, and
// their EU neighbours, to countries; a zone of any other region is left out
// rather than guessed.
var awsCountries = map[string]string{
	"us-east-1": "US", "us-east-2": "US", "us-west-1": "US", "us-west-2": "US",
	"ca-central-1": "CA", "eu-central-1": "DE", "eu-west-1": "IE", "eu-west-2": "GB",
	"eu-west-3": "FR", "eu-north-1": "SE", "eu-south-1": "IT",
}

// instanceShape is an AWS instance type of the traces: per instance, with
// the us-east-1 on-demand list price of the time in USD.
type instanceShape struct {
	vcpu, memoryGB, gpuMemoryGB int
	onDemand                    string
}

// awsShapes is keyed by card and GPU count, as in the trace file names:
// p3.2xlarge, p3.16xlarge, p2.xlarge, p2.8xlarge.
var awsShapes = map[string]instanceShape{
	"v100_1": {vcpu: 8, memoryGB: 61, gpuMemoryGB: 16, onDemand: "3.06"},
	"v100_8": {vcpu: 64, memoryGB: 488, gpuMemoryGB: 16, onDemand: "24.48"},
	"k80_1":  {vcpu: 4, memoryGB: 61, gpuMemoryGB: 12, onDemand: "0.90"},
	"k80_8":  {vcpu: 32, memoryGB: 488, gpuMemoryGB: 12, onDemand: "7.20"},
}

// spotShare is the spot price as a share of on-demand in the traces'
// setting (README of the traces: about 0.3), in thousandths.
const spotShare = 300

// PoolsFromTraces derives pools from the trace files directly in dir, named
// ZONE_CARD_COUNT.json as published: for each, a spot pool that follows the
// trace and an on-demand pool of the same zone and shape without a bound.
// Files whose zone or shape the table does not know are skipped and named
// in the returned list.
func PoolsFromTraces(dir string) (pools []PoolConfig, skipped []string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("traces directory: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".json") {
			continue
		}
		stem := strings.TrimSuffix(name, ".json")
		zone, shapeKey, ok := strings.Cut(stem, "_")
		shape, known := awsShapes[strings.ToLower(shapeKey)]
		country := awsCountries[strings.TrimRight(zone, "abcdefghijklmnopqrstuvwxyz")]
		if !ok || !known || country == "" {
			skipped = append(skipped, name)
			continue
		}
		card, count, _ := strings.Cut(shapeKey, "_")
		n, _ := strconv.Atoi(count)
		base := "sim-" + strings.ReplaceAll(stem, "_", "-")
		spotPrice, err := scale(shape.onDemand, spotShare)
		if err != nil {
			return nil, nil, err
		}
		p := PoolConfig{
			Pool: base, Region: zone, Country: country, Card: strings.ToUpper(card), GPUCount: n,
			GPUMemoryGB: shape.gpuMemoryGB, VCPU: shape.vcpu, MemoryGB: shape.memoryGB,
			Tier: "on-demand", PricePerHour: shape.onDemand, Currency: "USD",
		}
		pools = append(pools, p)
		p.Pool, p.Tier, p.PricePerHour, p.Trace = base+"-spot", "spot", spotPrice, name
		pools = append(pools, p)
	}
	if len(pools) == 0 {
		return nil, skipped, fmt.Errorf("traces directory %s: no trace named ZONE_CARD_COUNT.json of a known zone and shape directly in it (name one of its folders)", dir)
	}
	slices.SortFunc(pools, func(a, b PoolConfig) int { return strings.Compare(a.Pool, b.Pool) })
	return pools, skipped, nil
}

// scale returns the decimal amount times perMille/1000, to the cent.
func scale(amount string, perMille int64) (string, error) {
	whole, frac, _ := strings.Cut(amount, ".")
	cents, err := strconv.ParseInt(whole+(frac + "00")[:2], 10, 64)
	if err != nil {
		return "", fmt.Errorf("price %q: %w", amount, err)
	}
	c := (cents*perMille + 500) / 1000
	return fmt.Sprintf("%d.%02d", c/100, c%100), nil
}
