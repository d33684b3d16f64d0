package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue/control/httpapi"
)

func newOffersCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "offers",
		Short: "List the live offers of the configured providers, priced in the policy's currency",
		Long: `offers asks every configured provider (the local pools, and each of providers.verda and
providers.hivenet that is configured) for what it can rent now: the same offers the scheduler
places on. Prices are converted into the policy's base currency with policy.exchange_rates; an
offer in a currency without a rate keeps its own price and says so. A provider that fails is
named on stderr and the others are still listed.

With an HTTP API configured (--url, GPUQ_URL or url: in the config file, as gpuq dev writes
it) and no pools or providers in the config file, offers lists what that server's providers
offer, priced with the policy in effect there: a laptop sees the server's offers.`,
		Args: cobra.NoArgs,
		RunE: runOffers,
	}
	cmd.Flags().StringSlice("provider", nil, "only these providers (globs, comma-separated), e.g. verda,hivenet")
	cmd.Flags().StringSlice("region", nil, "only these regions (globs, comma-separated), e.g. 'FIN-*'")
	cmd.Flags().Duration("timeout", 30*time.Second, "give up on a provider after this long")
	cmd.Flags().String("url", "", "gpuq HTTP API URL (env GPUQ_URL; token from GPUQ_TOKEN or the config file's token key): list what that server's providers offer, priced with its policy")
	return cmd
}

// OfferRow is one line of `gpuq offers -o json`.
type OfferRow struct {
	policy.Offer
	// PricePerHour is in the policy's base currency when a rate is known;
	// QuotedPricePerHour is the provider's own price.
	QuotedPricePerHour policy.Money `json:"quoted_price_per_hour"`
	// NoRate is set when the offer's currency has no exchange rate.
	NoRate bool `json:"no_exchange_rate,omitempty"`
}

func runOffers(cmd *cobra.Command, _ []string) error {
	v, format, err := loadConfigFormat(cmd)
	if err != nil {
		return err
	}
	providers, regions := v.GetStringSlice("provider"), v.GetStringSlice("region")
	for _, g := range append(slices.Clone(providers), regions...) {
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("--provider, --region: %q is not a glob: %w", g, err)
		}
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), v.GetDuration("timeout"))
	defer cancel()
	var offers []policy.Offer
	var rules policy.Rules
	if askServer(v, "pools", "providers") {
		// The server's providers and policy: this machine's config names
		// none of its own.
		var list httpapi.OfferList
		if _, err := getAPIDoc(ctx, v, "/v1/offers", nil, &list); err != nil {
			return err
		}
		for _, o := range list.Offers {
			if matchAny(providers, o.Provider) {
				offers = append(offers, o)
			}
		}
		rules.BaseCurrency, rules.ExchangeRates = list.BaseCurrency, list.ExchangeRates
	} else {
		if rules, err = loadRules(v); err != nil {
			return err
		}
		if offers, err = collectConfiguredOffers(ctx, cmd, v, providers); err != nil {
			return err
		}
	}
	base := rules.BaseCurrency
	if base == "" {
		base = "EUR"
	}
	rates := map[string]float64{base: 1}
	for cur, r := range rules.ExchangeRates {
		rates[strings.ToUpper(cur)] = r
	}
	var rows []OfferRow
	for _, o := range offers {
		if !matchAny(regions, o.Region) {
			continue
		}
		row := OfferRow{Offer: o, QuotedPricePerHour: o.PricePerHour}
		if m, ok := convert(o.PricePerHour, base, rates); ok {
			row.PricePerHour = m
		} else {
			row.NoRate = true
		}
		if o.EgressPerGB != nil {
			if m, ok := convert(*o.EgressPerGB, base, rates); ok {
				row.EgressPerGB = &m
			}
		}
		rows = append(rows, row)
	}
	slices.SortStableFunc(rows, func(a, b OfferRow) int {
		if c := strings.Compare(a.Provider, b.Provider); c != 0 {
			return c
		}
		return strings.Compare(a.Pool, b.Pool)
	})
	if format == "json" {
		if rows == nil {
			rows = []OfferRow{}
		}
		return writeJSON(cmd.OutOrStdout(), rows)
	}
	t := newTable(cmd.OutOrStdout(), "PROVIDER", "POOL", "REGION", "COUNTRY", "CARD", "GPUS", "VCPU", "MEM_GB", "TIER", "PRICE/H", "AVAILABILITY")
	for _, r := range rows {
		price := r.PricePerHour.String()
		if r.NoRate {
			price += " (no rate to " + base + ")"
		}
		t.row(r.Provider, r.Pool, r.Region, r.Country, r.Card, r.GPUCount, r.VCPU, r.MemoryGB, r.Tier, price, orDash(string(r.Availability)))
	}
	return t.flush()
}

// askServer reports whether offers or plan asks the HTTP API rather than
// answering here: an API URL is configured, and the config file names none
// of keys (its own pools, providers or policy, which would be what the user
// asks about).
func askServer(v *viper.Viper, keys ...string) bool {
	if v.GetString("url") == "" {
		return false
	}
	for _, k := range keys {
		if v.InConfig(k) {
			return false
		}
	}
	return true
}

// collectConfiguredOffers asks each configured provider whose name matches
// one of the globs for its offers; a provider that fails is named on
// stderr and the others' offers are kept.
func collectConfiguredOffers(ctx context.Context, cmd *cobra.Command, v *viper.Viper, providers []string) ([]policy.Offer, error) {
	sources, err := offerSources(v)
	if err != nil {
		return nil, err
	}
	var picked []adapters.OfferSource
	for _, s := range sources {
		if matchAny(providers, s.Name()) {
			picked = append(picked, s)
		}
	}
	if len(picked) == 0 {
		return nil, fmt.Errorf("--provider: no configured provider matches %s", strings.Join(providers, ","))
	}
	offers, srcErr := adapters.CollectOffers(ctx, picked...)
	if srcErr != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), "gpuq offers:", srcErr)
	}
	if len(offers) == 0 && srcErr != nil {
		return nil, errors.New("no provider answered")
	}
	return offers, nil
}

func matchAny(globs []string, s string) bool {
	if len(globs) == 0 {
		return true
	}
	for _, g := range globs {
		if ok, _ := path.Match(g, s); ok {
			return true
		}
	}
	return false
}

// convert turns m into base with rates (value of one unit in base),
// rounding to the micro; ok is false without a rate.
func convert(m policy.Money, base string, rates map[string]float64) (policy.Money, bool) {
	r, ok := rates[m.Currency]
	if !ok || !(r > 0) || math.IsInf(r, 0) {
		return m, false
	}
	if m.Currency == base {
		return m, true
	}
	// Exact decimal arithmetic: the rate as written, times the micros.
	prod := new(big.Float).SetPrec(128).Mul(new(big.Float).SetPrec(128).SetInt64(m.Micros), new(big.Float).SetPrec(128).SetFloat64(r))
	prod.Add(prod, big.NewFloat(0.5))
	micros, _ := prod.Int64()
	return policy.Money{Micros: micros, Currency: base}, true
}
