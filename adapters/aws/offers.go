package aws

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
)

// regionMarket is what EC2 says about the configured instance types of
// one region.
type regionMarket struct {
	info  map[string]types.InstanceTypeInfo
	zones map[string][]string // instance type → standard zones offering it
	spot  map[spotKey]policy.Money
}

// Offers lists one offer per configured pool, read from EC2 region by
// region. A pool whose type no standard zone of its region offers, whose
// region's country is unknown, or (spot) that has no current spot price is
// left out and logged.
func (p *Provider) Offers(ctx context.Context) ([]policy.Offer, error) {
	var offers []policy.Offer
	for _, region := range p.regions() {
		m, err := p.market(ctx, region)
		if err != nil {
			return nil, err
		}
		for _, pool := range p.cfg.Pools {
			if pool.Region != region {
				continue
			}
			o, why := p.offer(pool, m)
			if why != "" {
				p.cfg.Logger.Warn("aws pool left out of the offers", "pool", pool.Pool, "reason", why)
				continue
			}
			offers = append(offers, o)
		}
	}
	return offers, nil
}

func (p *Provider) offer(pool PoolConfig, m *regionMarket) (policy.Offer, string) {
	country, known := regionCountries[pool.Region]
	if !known {
		return policy.Offer{}, fmt.Sprintf("the country of region %s is not known", pool.Region)
	}
	info, ok := m.info[pool.InstanceType]
	if !ok {
		return policy.Offer{}, fmt.Sprintf("EC2 does not describe instance type %s in %s", pool.InstanceType, pool.Region)
	}
	zones := p.zonesOf(pool, m)
	if len(zones) == 0 {
		return policy.Offer{}, fmt.Sprintf("no standard zone of %s offers %s", pool.Region, pool.InstanceType)
	}
	o := policy.Offer{Provider: ProviderName, Pool: pool.Pool, Region: pool.Region, Country: country, Tier: pool.Tier,
		// EC2 says where a type is offered, not whether capacity is free.
		Availability: policy.AvailabilityUnknown}
	o.Card, o.GPUCount, o.GPUMemoryGB = gpus(info)
	if pool.Card != "" {
		o.Card = pool.Card
	}
	if info.VCpuInfo != nil {
		o.VCPU = int(awssdk.ToInt32(info.VCpuInfo.DefaultVCpus))
	}
	if info.MemoryInfo != nil {
		o.MemoryGB = int(awssdk.ToInt64(info.MemoryInfo.SizeInMiB) / 1024)
	}
	if pool.EgressPerGB != "" {
		e, _ := adapters.ParsePrice(pool.EgressPerGB, Currency) // checked by validate
		o.EgressPerGB = &e
	}
	if pool.Tier == policy.TierOnDemand {
		o.PricePerHour, _ = adapters.ParsePrice(pool.OnDemandPrice, Currency) // checked by validate
		return o, ""
	}
	best := policy.Money{Micros: math.MaxInt64}
	for _, z := range zones {
		if price, ok := m.spot[spotKey{pool.InstanceType, z}]; ok && price.Micros < best.Micros {
			best = price
		}
	}
	if best.Micros == math.MaxInt64 {
		return policy.Offer{}, fmt.Sprintf("no current spot price for %s in %s", pool.InstanceType, pool.Region)
	}
	o.PricePerHour = best
	return o, ""
}

// zonesOf lists the standard zones where pool may launch.
func (p *Provider) zonesOf(pool PoolConfig, m *regionMarket) []string {
	var zones []string
	for _, z := range m.zones[pool.InstanceType] {
		if pool.Zone == "" || z == pool.Zone {
			zones = append(zones, z)
		}
	}
	return zones
}

// gpus reads the card name, GPU count and per-GPU memory of a type; a type
// without GPUs is card "cpu".
func gpus(info types.InstanceTypeInfo) (card string, count, memGB int) {
	if info.GpuInfo == nil || len(info.GpuInfo.Gpus) == 0 {
		return "cpu", 0, 0
	}
	g := info.GpuInfo.Gpus[0]
	for _, d := range info.GpuInfo.Gpus {
		count += int(awssdk.ToInt32(d.Count))
	}
	if g.MemoryInfo != nil {
		memGB = int(awssdk.ToInt32(g.MemoryInfo.SizeInMiB) / 1024)
	}
	return awssdk.ToString(g.Name), count, memGB
}

// market reads, for one region, the configured types' descriptions, the
// zones offering them and (for spot pools) their current spot prices,
// following every page.
func (p *Provider) market(ctx context.Context, region string) (*regionMarket, error) {
	client := p.clients[region]
	var all, spotTypes []string
	for _, pool := range p.cfg.Pools {
		if pool.Region != region {
			continue
		}
		if !slices.Contains(all, pool.InstanceType) {
			all = append(all, pool.InstanceType)
		}
		if pool.Tier == policy.TierSpot && !slices.Contains(spotTypes, pool.InstanceType) {
			spotTypes = append(spotTypes, pool.InstanceType)
		}
	}
	m := &regionMarket{info: map[string]types.InstanceTypeInfo{}, zones: map[string][]string{}, spot: map[spotKey]policy.Money{}}
	typeList := make([]types.InstanceType, len(all))
	for i, t := range all {
		typeList[i] = types.InstanceType(t)
	}
	err := p.retry(ctx, "offers", "", func(ctx context.Context) error {
		clear(m.info)
		pages := ec2.NewDescribeInstanceTypesPaginator(client, &ec2.DescribeInstanceTypesInput{InstanceTypes: typeList})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				return err
			}
			for _, it := range page.InstanceTypes {
				m.info[string(it.InstanceType)] = it
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = p.retry(ctx, "offers", "", func(ctx context.Context) error {
		clear(m.zones)
		pages := ec2.NewDescribeInstanceTypeOfferingsPaginator(client, &ec2.DescribeInstanceTypeOfferingsInput{
			LocationType: types.LocationTypeAvailabilityZone,
			Filters:      []types.Filter{{Name: awssdk.String("instance-type"), Values: all}},
		})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				return err
			}
			for _, o := range page.InstanceTypeOfferings {
				zone := awssdk.ToString(o.Location)
				// Local and Wavelength zones sit in other cities, often
				// other countries, than their parent region.
				if _, ok := zoneCountry(region, zone); !ok {
					continue
				}
				t := string(o.InstanceType)
				if !slices.Contains(m.zones[t], zone) {
					m.zones[t] = append(m.zones[t], zone)
				}
			}
		}
		return nil
	})
	if err != nil || len(spotTypes) == 0 {
		return m, err
	}
	spot, err := p.spotPrices(ctx, region, spotTypes, "")
	if err != nil {
		return nil, err
	}
	m.spot = spot
	return m, nil
}

// spotPrices reads the spot price in effect now for each type and zone
// (only zone, when set): with StartTime and EndTime both now, EC2 returns
// the last price change before that instant, per zone.
func (p *Provider) spotPrices(ctx context.Context, region string, instanceTypes []string, zone string) (map[spotKey]policy.Money, error) {
	now := time.Now().UTC()
	in := &ec2.DescribeSpotPriceHistoryInput{
		ProductDescriptions: []string{p.cfg.ProductDescription},
		StartTime:           awssdk.Time(now), EndTime: awssdk.Time(now),
	}
	for _, t := range instanceTypes {
		in.InstanceTypes = append(in.InstanceTypes, types.InstanceType(t))
	}
	if zone != "" {
		in.AvailabilityZone = awssdk.String(zone)
	}
	out := map[spotKey]policy.Money{}
	latest := map[spotKey]time.Time{}
	err := p.retry(ctx, "offers", "", func(ctx context.Context) error {
		clear(out)
		clear(latest)
		pages := ec2.NewDescribeSpotPriceHistoryPaginator(p.clients[region], in)
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				return err
			}
			for _, sp := range page.SpotPriceHistory {
				k := spotKey{string(sp.InstanceType), awssdk.ToString(sp.AvailabilityZone)}
				at := awssdk.ToTime(sp.Timestamp)
				if prev, ok := latest[k]; ok && !at.After(prev) {
					continue
				}
				price, err := adapters.ParsePrice(awssdk.ToString(sp.SpotPrice), Currency)
				if err != nil {
					return fmt.Errorf("spot price of %s in %s: %w", k.instanceType, k.zone, err)
				}
				out[k], latest[k] = price, at
			}
		}
		return nil
	})
	return out, err
}
