package aws

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
)

// maxUserData is EC2's limit on user data before base64 encoding.
const maxUserData = 16 << 10

// Launch rents one instance for req.Pool with RunInstances: spot market
// options for a spot pool (one-time, terminate on interruption, capped at
// the pool's on-demand price when configured), the boot spec as cloud-init
// user data, gpuq's tags, and req.ClientToken as EC2's ClientToken, so that
// EC2 itself returns the first instance to a repeated request. After an
// unknown outcome the instance is looked for by its token before any retry.
func (p *Provider) Launch(ctx context.Context, req adapters.LaunchRequest) (adapters.Instance, error) {
	pool, ok := p.pools[req.Pool]
	if !ok {
		return adapters.Instance{}, &adapters.ProviderError{Provider: ProviderName, Op: "launch", Pool: req.Pool,
			Kind: adapters.ErrInvalidRequest, Err: fmt.Errorf("no aws pool %q", req.Pool)}
	}
	if req.Boot.Notice == "" {
		req.Boot.Notice = adapters.NoticeAWS
	}
	in, err := p.runInput(ctx, pool, req)
	if err != nil {
		return adapters.Instance{}, &adapters.ProviderError{Provider: ProviderName, Op: "launch", Pool: req.Pool, Kind: adapters.ErrInvalidRequest, Err: err}
	}
	client := p.clients[pool.Region]
	create := func(ctx context.Context) (adapters.Instance, error) {
		out, err := client.RunInstances(ctx, in)
		if err != nil {
			return adapters.Instance{}, fail("launch", req.Pool, err)
		}
		if len(out.Instances) != 1 {
			return adapters.Instance{}, &adapters.ProviderError{Provider: ProviderName, Op: "launch", Pool: req.Pool,
				Kind: adapters.ErrProviderDown, Err: fmt.Errorf("RunInstances returned %d instances, want 1", len(out.Instances))}
		}
		return p.instance(ctx, pool.Region, out.Instances[0]), nil
	}
	find := func(ctx context.Context, token string) (adapters.Instance, bool, error) {
		found, err := p.list(ctx, pool.Region, adapters.InstanceFilter{ClientToken: token, IncludeGone: true})
		if err != nil || len(found) == 0 {
			return adapters.Instance{}, false, err
		}
		return found[0], true, nil
	}
	return adapters.LaunchIdempotent(ctx, p.cfg.Retry, req, create, find)
}

// runInput builds the RunInstances request for req.
func (p *Provider) runInput(ctx context.Context, pool PoolConfig, req adapters.LaunchRequest) (*ec2.RunInstancesInput, error) {
	userData, err := req.Boot.CloudInit()
	if err != nil {
		return nil, fmt.Errorf("boot.%w", err)
	}
	if len(userData) > maxUserData {
		return nil, fmt.Errorf("boot: cloud-init user data is %d bytes, over EC2's %d", len(userData), maxUserData)
	}
	tags := req.Tags()
	tags["Name"] = "gpuq-" + req.Pool + "-" + req.Boot.InstanceID
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var tagList []types.Tag
	for _, k := range keys {
		tagList = append(tagList, types.Tag{Key: awssdk.String(k), Value: awssdk.String(tags[k])})
	}
	in := &ec2.RunInstancesInput{
		ImageId:      awssdk.String(pool.ImageID),
		InstanceType: types.InstanceType(pool.InstanceType),
		MinCount:     awssdk.Int32(1),
		MaxCount:     awssdk.Int32(1),
		ClientToken:  awssdk.String(req.ClientToken),
		UserData:     awssdk.String(base64.StdEncoding.EncodeToString([]byte(userData))),
		TagSpecifications: []types.TagSpecification{
			{ResourceType: types.ResourceTypeInstance, Tags: tagList},
			{ResourceType: types.ResourceTypeVolume, Tags: tagList},
		},
		// IMDSv2 only: the worker's notice watcher uses session tokens.
		MetadataOptions:                   &types.InstanceMetadataOptionsRequest{HttpTokens: types.HttpTokensStateRequired},
		InstanceInitiatedShutdownBehavior: types.ShutdownBehaviorTerminate,
	}
	if pool.SubnetID != "" {
		in.SubnetId = awssdk.String(pool.SubnetID)
	}
	in.SecurityGroupIds = pool.SecurityGroupIDs
	if pool.InstanceProfile != "" {
		in.IamInstanceProfile = &types.IamInstanceProfileSpecification{Name: awssdk.String(pool.InstanceProfile)}
	}
	zone := pool.Zone
	if pool.Tier == policy.TierSpot {
		spot := &types.SpotMarketOptions{
			SpotInstanceType:             types.SpotInstanceTypeOneTime,
			InstanceInterruptionBehavior: types.InstanceInterruptionBehaviorTerminate,
		}
		if pool.OnDemandPrice != "" {
			spot.MaxPrice = awssdk.String(pool.OnDemandPrice)
		}
		in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot, SpotOptions: spot}
		if zone == "" && pool.SubnetID == "" {
			// The cheapest zone now; a failure to read prices leaves the
			// choice to EC2.
			zone = p.cheapestZone(ctx, pool)
		}
	}
	if zone != "" && pool.SubnetID == "" {
		in.Placement = &types.Placement{AvailabilityZone: awssdk.String(zone)}
	}
	return in, nil
}

func (p *Provider) cheapestZone(ctx context.Context, pool PoolConfig) string {
	prices, err := p.spotPrices(ctx, pool.Region, []string{pool.InstanceType}, "")
	if err != nil {
		return ""
	}
	best, zone := int64(math.MaxInt64), ""
	for k, price := range prices {
		if _, ok := zoneCountry(pool.Region, k.zone); ok && price.Micros < best {
			best, zone = price.Micros, k.zone
		}
	}
	return zone
}

// Instances lists gpuq's instances in every configured region, following
// every page of DescribeInstances.
func (p *Provider) Instances(ctx context.Context, f adapters.InstanceFilter) ([]adapters.Instance, error) {
	var all []adapters.Instance
	for _, region := range p.regions() {
		got, err := p.list(ctx, region, f)
		if err != nil {
			return nil, err
		}
		all = append(all, got...)
	}
	return all, nil
}

func (p *Provider) list(ctx context.Context, region string, f adapters.InstanceFilter) ([]adapters.Instance, error) {
	filters := []types.Filter{{Name: awssdk.String("tag:" + adapters.TagManagedBy), Values: []string{adapters.ManagedBy}}}
	if f.Pool != "" {
		filters = append(filters, types.Filter{Name: awssdk.String("tag:" + adapters.TagPool), Values: []string{f.Pool}})
	}
	if f.ClientToken != "" {
		filters = append(filters, types.Filter{Name: awssdk.String("client-token"), Values: []string{f.ClientToken}})
	}
	var raw []types.Instance
	err := p.retry(ctx, "list", f.Pool, func(ctx context.Context) error {
		raw = raw[:0]
		pages := ec2.NewDescribeInstancesPaginator(p.clients[region], &ec2.DescribeInstancesInput{Filters: filters})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				return err
			}
			for _, r := range page.Reservations {
				raw = append(raw, r.Instances...)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []adapters.Instance
	for _, i := range raw {
		if inst := p.instance(ctx, region, i); f.Match(inst) {
			out = append(out, inst)
		}
	}
	return out, nil
}

// Describe reads one instance by its provider id (region/i-…).
func (p *Provider) Describe(ctx context.Context, id string) (adapters.Instance, error) {
	region, instanceID, err := splitProviderID(id)
	if err == nil && p.clients[region] == nil {
		err = fmt.Errorf("instance %q: region %s is not configured", id, region)
	}
	if err != nil {
		return adapters.Instance{}, &adapters.ProviderError{Provider: ProviderName, Op: "describe", Kind: adapters.ErrNotFound, Err: err}
	}
	var raw []types.Instance
	err = p.retry(ctx, "describe", "", func(ctx context.Context) error {
		out, err := p.clients[region].DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{instanceID}})
		if err != nil {
			return err
		}
		raw = raw[:0]
		for _, r := range out.Reservations {
			raw = append(raw, r.Instances...)
		}
		return nil
	})
	if err != nil {
		return adapters.Instance{}, err
	}
	if len(raw) == 0 {
		return adapters.Instance{}, &adapters.ProviderError{Provider: ProviderName, Op: "describe", Kind: adapters.ErrNotFound, Err: fmt.Errorf("instance %s", id)}
	}
	return p.instance(ctx, region, raw[0]), nil
}

// Terminate releases the instance; one EC2 no longer knows is done.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	region, instanceID, err := splitProviderID(id)
	if err != nil || p.clients[region] == nil {
		return nil // never one of ours: nothing to release
	}
	err = p.retry(ctx, "terminate", "", func(ctx context.Context) error {
		_, err := p.clients[region].TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{instanceID}})
		return err
	})
	if errors.Is(err, adapters.ErrNotFound) {
		return nil
	}
	return err
}

// instance converts EC2's description.
func (p *Provider) instance(ctx context.Context, region string, i types.Instance) adapters.Instance {
	tags := map[string]string{}
	for _, t := range i.Tags {
		if k := awssdk.ToString(t.Key); len(k) > 5 && k[:5] == "gpuq-" {
			tags[k] = awssdk.ToString(t.Value)
		}
	}
	inst := adapters.Instance{
		Provider: ProviderName, ProviderID: providerID(region, awssdk.ToString(i.InstanceId)),
		Pool: tags[adapters.TagPool], ClientToken: tags[adapters.TagClientToken], Tags: tags,
		LaunchedAt: awssdk.ToTime(i.LaunchTime),
	}
	if inst.ClientToken == "" {
		inst.ClientToken = awssdk.ToString(i.ClientToken)
	}
	var reason string
	if i.StateReason != nil {
		reason = awssdk.ToString(i.StateReason.Code)
		inst.Reason = awssdk.ToString(i.StateReason.Message)
	}
	state := types.InstanceStateNamePending
	if i.State != nil {
		state = i.State.Name
	}
	switch state {
	case types.InstanceStateNamePending:
		inst.State = adapters.StatePending
	case types.InstanceStateNameRunning:
		inst.State = adapters.StateRunning
	case types.InstanceStateNameShuttingDown, types.InstanceStateNameStopping, types.InstanceStateNameStopped:
		inst.State = adapters.StateStopping
	case types.InstanceStateNameTerminated:
		inst.State = adapters.StateTerminated
	default:
		inst.State = adapters.StatePending
	}
	// EC2 reclaimed a spot instance: Server.SpotInstanceTermination (or
	// Server.SpotInstanceShutdown for a stop) as the state reason.
	if (reason == "Server.SpotInstanceTermination" || reason == "Server.SpotInstanceShutdown") &&
		(inst.State == adapters.StateTerminated || inst.State == adapters.StateStopping) {
		inst.State = adapters.StatePreempted
	}
	inst.PricePerHour = p.charge(ctx, region, i, inst.Pool)
	return inst
}

// charge is what EC2 bills for the instance per hour: the pool's
// configured on-demand price, or the spot price now in effect in the
// instance's zone (EC2 bills spot at the market price, not the bid).
// Zero when unknown.
func (p *Provider) charge(ctx context.Context, region string, i types.Instance, pool string) policy.Money {
	zero := policy.Money{Currency: Currency}
	if i.InstanceLifecycle != types.InstanceLifecycleTypeSpot {
		if pc, ok := p.pools[pool]; ok && pc.OnDemandPrice != "" {
			m, _ := adapters.ParsePrice(pc.OnDemandPrice, Currency)
			return m
		}
		return zero
	}
	var zone string
	if i.Placement != nil {
		zone = awssdk.ToString(i.Placement.AvailabilityZone)
	}
	k := spotKey{string(i.InstanceType), zone}
	p.mu.Lock()
	cached, ok := p.prices[k]
	p.mu.Unlock()
	if ok && cached.read.After(time.Now().Add(-spotPriceTTL)) {
		return cached.price
	}
	prices, err := p.spotPrices(ctx, region, []string{k.instanceType}, zone)
	if err != nil || prices[k].Currency == "" {
		return zero
	}
	p.mu.Lock()
	p.prices[k] = spotPrice{price: prices[k], read: time.Now()}
	p.mu.Unlock()
	return prices[k]
}
