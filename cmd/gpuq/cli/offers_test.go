package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// hivenetCatalogue answers GET /presets as the Hive Compute API does (one
// page); every other path fails as an outage would.
func hivenetCatalogue(t *testing.T, key string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(401)
			w.Write([]byte(`{"error": {"code": "unauthorized", "message": "Invalid API key"}}`)) //nolint:errcheck // test server
			return
		}
		if r.URL.Path != "/presets" {
			w.WriteHeader(503)
			return
		}
		w.Write([]byte(`{"data": [{"id": "p-1", "sku": "1x-RTX-4090", "region": "FR", "location": "paris-1", "gpu_model": "RTX 4090",
			"gpu_count": 1, "cpu": "8", "memory": "48", "storage": "250", "hourly_price": "0.49", "price_discounted": ""}],
			"pagination": {"next": null}}`)) //nolint:errcheck // test server
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestOffersListsEveryConfiguredProviderInThePolicyCurrency(t *testing.T) {
	t.Parallel()
	srv := hivenetCatalogue(t, "hk-test-key")
	cfg := writeFile(t, "gpuq.yaml", `pools:
  - {pool: us-cpu, region: us-east-1, country: US, card: cpu, vcpu: 4, memory_gb: 8, price_per_hour: "1.00", currency: USD}
  - {pool: de-cpu, region: eu-central-1, country: DE, card: cpu, vcpu: 4, memory_gb: 8, price_per_hour: "0.10", currency: EUR}
  - {pool: ch-cpu, region: eu-zurich-1, country: CH, card: cpu, vcpu: 4, memory_gb: 8, price_per_hour: "0.10", currency: CHF}
policy:
  exchange_rates: {USD: 0.92}
providers:
  hivenet: {base_url: `+srv.URL+`, api_key: hk-test-key, image_id: img-1}
`)
	out, errOut, err := runCLI(t, "offers", "--config", cfg, "-o", "json")
	if err != nil {
		t.Fatalf("offers: %v\n%s", err, errOut)
	}
	var rows []OfferRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := map[string]OfferRow{}
	for _, r := range rows {
		got[r.Pool] = r
	}
	if r := got["us-cpu"]; r.PricePerHour.String() != "0.92 EUR" || r.QuotedPricePerHour.String() != "1.00 USD" {
		t.Errorf("us-cpu = %+v, want 0.92 EUR quoted as 1.00 USD", r)
	}
	if r := got["ch-cpu"]; !r.NoRate || r.PricePerHour.String() != "0.10 CHF" {
		t.Errorf("ch-cpu = %+v, want its own price and no_exchange_rate", r)
	}
	if r := got["hivenet-FR-paris-1-1x-RTX-4090"]; r.Provider != "hivenet" || r.Country != "FR" || r.PricePerHour.String() != "0.49 EUR" {
		t.Errorf("hivenet offer = %+v", r)
	}
	out, _, err = runCLI(t, "offers", "--config", cfg, "--provider", "hive*", "--region", "FR", "-o", "json")
	if err != nil || strings.Count(out, `"pool"`) != 1 || !strings.Contains(out, "hivenet-FR-paris-1") {
		t.Errorf("filtered offers = %v\n%s", err, out)
	}
}

func TestOffersNamesAFailingProviderAndListsTheRest(t *testing.T) {
	t.Parallel()
	srv := hivenetCatalogue(t, "right-key")
	cfg := writeFile(t, "gpuq.yaml", `providers:
  hivenet: {base_url: `+srv.URL+`, api_key: wrong-key-value, image_id: img-1}
`)
	out, errOut, err := runCLI(t, "offers", "--config", cfg)
	if err != nil {
		t.Fatalf("offers: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "offers from hivenet") || !strings.Contains(errOut, "authentication failed") || strings.Contains(errOut, "wrong-key-value") {
		t.Errorf("stderr = %q, want the failing provider named, without its key", errOut)
	}
	if !strings.Contains(out, "local-cpu") {
		t.Errorf("the local pools are missing:\n%s", out)
	}
}

func TestOffersRefusesBadFlags(t *testing.T) {
	t.Parallel()
	if _, _, err := runCLI(t, "offers", "--provider", "aws"); err == nil || !strings.Contains(err.Error(), "--provider: no configured provider matches aws") {
		t.Errorf("offers --provider aws = %v", err)
	}
	if _, _, err := runCLI(t, "offers", "--region", "[x"); err == nil || !strings.HasPrefix(err.Error(), "--provider, --region:") {
		t.Errorf("offers --region [x = %v", err)
	}
}
