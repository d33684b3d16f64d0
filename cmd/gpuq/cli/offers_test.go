package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/policy"
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

// runpodCatalogue answers the RunPod adapter's GpuLowestPrice query as
// RunPod's GraphQL API does.
func runpodCatalogue(t *testing.T, key string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Query string }
		json.NewDecoder(r.Body).Decode(&req) //nolint:errcheck // checked below
		if r.Header.Get("Authorization") != "Bearer "+key || !strings.HasPrefix(req.Query, "query GpuLowestPrice") {
			w.WriteHeader(401)
			return
		}
		w.Write([]byte(`{"data": {"gpuTypes": [{"id": "NVIDIA A40", "displayName": "A40", "memoryInGb": 48, "lowestPrice":
			{"minimumBidPrice": 0.25, "uninterruptablePrice": 0.44, "stockStatus": "High", "minVcpu": 9, "minMemory": 50}}]}}`)) //nolint:errcheck // test server
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestOffersListsRunPodAndAWSFromTheirConfigKeys(t *testing.T) {
	t.Setenv("RUNPOD_API_KEY", "rpa-test-key")
	srv := runpodCatalogue(t, "rpa-test-key")
	cfg := writeFile(t, "gpuq.yaml", `policy:
  exchange_rates: {USD: 0.92}
providers:
  runpod:
    endpoint: `+srv.URL+`
    pools: [{pool: rp-is-a40, gpu_type_id: NVIDIA A40, card: A40, data_center_id: EUR-IS-1, tier: on-demand}]
`)
	out, errOut, err := runCLI(t, "offers", "--config", cfg, "--provider", "runpod", "-o", "json")
	if err != nil {
		t.Fatalf("offers: %v\n%s", err, errOut)
	}
	var rows []OfferRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("want one RunPod offer, got %v\n%s", err, out)
	}
	if r := rows[0]; r.Pool != "rp-is-a40" || r.Country != "IS" || r.QuotedPricePerHour.String() != "0.44 USD" || r.PricePerHour.String() != "0.4048 EUR" {
		t.Errorf("RunPod offer = %+v, want rp-is-a40 in IS at 0.44 USD (0.4048 EUR)", r)
	}
	bad := writeFile(t, "bad.yaml", `providers:
  aws:
    pools: [{pool: aws-fra, region: eu-central-1, instance_type: g6.xlarge, tier: spot}]
`)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	if _, _, err := runCLI(t, "offers", "--config", bad); err == nil || !strings.Contains(err.Error(), "providers.aws.pools[0].image_id") {
		t.Errorf("an AWS pool without an AMI must be refused naming providers.aws.pools[0].image_id, got %v", err)
	}
}

// Where gpuq dev wrote its config (an API URL and a token, no pools), gpuq
// offers and gpuq plan answer with the server's pools and policy, as a
// laptop with GPUQ_URL and GPUQ_TOKEN needs, not with the defaults of a
// config that names none; --offers or --policy still plan here, a what-if.
func TestOffersAndPlanAskTheServerWhenAnAPIIsConfigured(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes")
	}
	t.Parallel()
	server := writeFile(t, "server.yaml", `pools:
  - {pool: us-cpu, region: us-east-1, country: US, card: cpu, vcpu: 4, memory_gb: 8, tier: on-demand, price_per_hour: "2.00", currency: USD}
policy:
  exchange_rates: {USD: 0.5}
`)
	dir := t.TempDir()
	startDev(t, buildGpuq(t), dir, "--http-addr", "127.0.0.1:0", "--config", server)
	config := filepath.Join(dir, devConfigFile)

	out, errOut, err := runCLI(t, "offers", "--config", config, "-o", "json")
	if err != nil {
		t.Fatalf("offers: %v\n%s", err, errOut)
	}
	var rows []OfferRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rows) != 1 || rows[0].Pool != "us-cpu" || rows[0].PricePerHour.String() != "1.00 EUR" || rows[0].QuotedPricePerHour.String() != "2.00 USD" {
		t.Fatalf("offers through the API: want the server's one pool at 1.00 EUR (2.00 USD at its rate), got %+v", rows)
	}
	if out, _, err := runCLI(t, "offers", "--config", config, "--provider", "verda"); err != nil || strings.Count(out, "\n") != 1 {
		t.Errorf("offers --provider verda through the API: want the table's header alone, got %v\n%s", err, out)
	}

	job := writeFile(t, "job.yaml", "command: [python, train.py]\n")
	out, errOut, err = runCLI(t, "plan", "--config", config, job)
	if err != nil || !strings.Contains(out, "chosen:     us-cpu") {
		t.Fatalf("plan through the API: want the server's pool chosen, got %v\n%s%s", err, out, errOut)
	}
	eu := writeFile(t, "eu.yaml", "command: [python, train.py]\nplacement: {residency: EU}\n")
	if out, _, err := runCLI(t, "plan", "--config", config, eu); exitCode(err) != exitPlanInfeasible || !strings.Contains(out, "us-cpu") {
		t.Errorf("plan of an EU job through the API: want exit %d rejecting us-cpu, got %v\n%s", exitPlanInfeasible, err, out)
	}
	// -o json prints what a plan made here prints: the decision, or the
	// refusal with its counted reasons.
	out, _, err = runCLI(t, "plan", "--config", config, "-o", "json", job)
	var d policy.Decision
	if err != nil || json.Unmarshal([]byte(out), &d) != nil || d.Chosen == nil || d.Chosen.Offer.Pool != "us-cpu" {
		t.Errorf("plan -o json through the API: want the decision choosing us-cpu, got %v\n%s", err, out)
	}
	out, _, err = runCLI(t, "plan", "--config", config, "-o", "json", eu)
	var refusal policy.NoPlacementError
	if exitCode(err) != exitPlanInfeasible || json.Unmarshal([]byte(out), &refusal) != nil || refusal.Offers != 1 || len(refusal.Counts) != 1 || len(refusal.Decision.Rejected()) != 1 {
		t.Errorf("plan -o json of an EU job through the API: want the refusal of the one offer with its reason counted, got %v\n%s", err, out)
	}
	offers := writeFile(t, "offers.yaml", `offers:
  - {provider: local, pool: what-if, region: eu-central-1, country: DE, card: cpu, vcpu: 4, memory_gb: 8, tier: on-demand, price_per_hour: "0.10 EUR"}
`)
	if out, errOut, err := runCLI(t, "plan", "--config", config, "--offers", offers, job); err != nil || !strings.Contains(out, "chosen:     what-if") {
		t.Errorf("plan --offers: want the what-if planned here on the file's offers, got %v\n%s%s", err, out, errOut)
	}
	// A config file naming pools of its own is asked about, API or not.
	devConfig, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	own := writeFile(t, "own.yaml", string(devConfig)+`pools:
  - {pool: mine, region: eu-central-1, country: DE, card: cpu, vcpu: 4, memory_gb: 8, tier: on-demand, price_per_hour: "0.20", currency: EUR}
`)
	if out, errOut, err := runCLI(t, "offers", "--config", own); err != nil || !strings.Contains(out, "mine") || strings.Contains(out, "us-cpu") {
		t.Errorf("offers with a config naming its own pools: want those, got %v\n%s%s", err, out, errOut)
	}
	if out, errOut, err := runCLI(t, "plan", "--config", own, job); err != nil || !strings.Contains(out, "chosen:     mine") {
		t.Errorf("plan with a config naming its own pools: want those, got %v\n%s%s", err, out, errOut)
	}
}
