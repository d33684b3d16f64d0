package runpod_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/adaptertest"
)

// fakeRunPod mimics RunPod's GraphQL API (POST /graphql, JSON
// {query, variables}, answers {data, errors}) for the operations the
// adapter sends, recognised by their operation names; it does not parse
// GraphQL. Shapes follow RunPod's GraphQL documentation and spec: gpuTypes
// with lowestPrice {minimumBidPrice uninterruptablePrice stockStatus
// minVcpu minMemory}, podRentInterruptable and podFindAndDeployOnDemand
// returning the pod, myself { pods }, pod(input: {podId}) (null when
// unknown), podTerminate. Assumed where the documentation is silent: a bad
// key is HTTP 401, throttling is HTTP 429 with Retry-After, a rent without
// capacity is a GraphQL error "There are no longer any instances
// available…" with a null pod, a terminated pod disappears from the
// listing, and the pod list is not paginated.
type fakeRunPod struct {
	*httptest.Server

	mu       sync.Mutex
	prices   map[string]fakePrice // "type|dc|secure" → lowest price
	pods     map[string]*fakePod
	order    []string
	failures map[adaptertest.Op][]error
	drop     bool
	calls    map[adaptertest.Op][]time.Time
	rented   int
}

type fakePrice struct {
	minBid, onDemand *float64
	stock            *string
	vcpu, memory     int
}

type fakePod struct {
	id, name, status, image, args, gpuType, dc string
	env                                        map[string]string
	bid                                        json.Number
	cost                                       string
	booted                                     time.Time
}

func ptr[T any](v T) *T { return &v }

func newFakeRunPod(t *testing.T) *fakeRunPod {
	f := &fakeRunPod{
		prices: map[string]fakePrice{
			"NVIDIA H100 80GB HBM3|EU-RO-1|true": {minBid: ptr(1.89), onDemand: ptr(2.99), stock: ptr("High"), vcpu: 16, memory: 125},
			"NVIDIA H100 80GB HBM3|EU-SE-1|true": {minBid: ptr(1.79), onDemand: ptr(2.99), stock: ptr("Low"), vcpu: 32, memory: 251},
			"NVIDIA A40|EUR-IS-1|false":          {minBid: ptr(0.25), onDemand: ptr(0.44), stock: ptr("Medium"), vcpu: 9, memory: 50},
		},
		pods: map[string]*fakePod{}, failures: map[adaptertest.Op][]error{}, calls: map[adaptertest.Op][]time.Time{},
	}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeRunPod) Fail(op adaptertest.Op, kind error, n int) bool {
	switch kind {
	case adapters.ErrQuotaExceeded:
		return false // RunPod documents no balance or quota error shape
	case adapters.ErrCapacityUnavailable:
		if op != adaptertest.OpLaunch {
			return false
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.failures[op] = append(f.failures[op], kind)
	}
	return true
}

func (f *fakeRunPod) DropLaunchResponse() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drop = true
	return true
}

func (f *fakeRunPod) Boot() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.pods {
		if p.status == "RUNNING" && p.booted.IsZero() {
			p.booted = time.Now().Add(-3 * time.Second)
		}
	}
}

func (f *fakeRunPod) Rented() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rented
}

func (f *fakeRunPod) Calls(op adaptertest.Op) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls[op])
}

func (f *fakeRunPod) SetPageSize(int) bool     { return false }
func (f *fakeRunPod) AddUnknownLocation() bool { return false }

// outbid stops an interruptible pod, as RunPod does when a higher bid
// takes its GPU.
func (f *fakeRunPod) outbid(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods[id].status = "EXITED"
}

func (f *fakeRunPod) pod(id string) fakePod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *f.pods[id]
}

var opName = regexp.MustCompile(`^(query|mutation) (\w+)`)

func (f *fakeRunPod) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
		writeJSON(w, 400, map[string]any{"errors": []map[string]string{{"message": "POST JSON only"}}})
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+testKey || r.URL.RawQuery != "" {
		writeJSON(w, 401, map[string]any{"errors": []map[string]string{{"message": "Unauthorized"}}})
		return
	}
	var req struct {
		Query     string                     `json:"query"`
		Variables map[string]json.RawMessage `json:"variables"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, map[string]any{"errors": []map[string]any{{"message": "Syntax Error", "extensions": map[string]string{"code": "GRAPHQL_PARSE_FAILED"}}}})
		return
	}
	m := opName.FindStringSubmatch(req.Query)
	if m == nil {
		writeJSON(w, 400, map[string]any{"errors": []map[string]any{{"message": "unknown operation", "extensions": map[string]string{"code": "GRAPHQL_VALIDATION_FAILED"}}}})
		return
	}
	op := map[string]adaptertest.Op{"GpuLowestPrice": adaptertest.OpOffers, "Rent": adaptertest.OpLaunch, "Deploy": adaptertest.OpLaunch,
		"Pods": adaptertest.OpList, "Pod": adaptertest.OpDescribe, "Terminate": adaptertest.OpTerminate}[m[2]]
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[op] = append(f.calls[op], time.Now())
	if q := f.failures[op]; len(q) > 0 {
		f.failures[op] = q[1:]
		f.injected(w, q[0], m[2])
		return
	}
	switch m[2] {
	case "GpuLowestPrice":
		f.lowestPrice(w, req.Variables)
	case "Rent", "Deploy":
		f.create(w, m[2], req.Variables)
	case "Pods":
		var pods []map[string]any
		for _, id := range f.order {
			if p, ok := f.pods[id]; ok {
				pods = append(pods, p.json())
			}
		}
		writeJSON(w, 200, map[string]any{"data": map[string]any{"myself": map[string]any{"pods": pods}}})
	case "Pod":
		var in struct{ PodID string }
		json.Unmarshal(req.Variables["input"], &in) //nolint:errcheck // an empty id finds nothing
		var out any
		if p, ok := f.pods[in.PodID]; ok {
			out = p.json()
		}
		writeJSON(w, 200, map[string]any{"data": map[string]any{"pod": out}})
	case "Terminate":
		var in struct{ PodID string }
		json.Unmarshal(req.Variables["input"], &in) //nolint:errcheck // an empty id finds nothing
		if _, ok := f.pods[in.PodID]; !ok {
			writeJSON(w, 200, map[string]any{"data": map[string]any{"podTerminate": nil},
				"errors": []map[string]any{{"message": "Pod not found", "path": []string{"podTerminate"}}}})
			return
		}
		delete(f.pods, in.PodID)
		writeJSON(w, 200, map[string]any{"data": map[string]any{"podTerminate": nil}})
	}
}

func (f *fakeRunPod) injected(w http.ResponseWriter, kind error, field string) {
	switch kind {
	case adapters.ErrCapacityUnavailable:
		writeJSON(w, 200, map[string]any{"data": map[string]any{"podRentInterruptable": nil},
			"errors": []map[string]any{{"message": "There are no longer any instances available with the requested specifications. Please refresh and try again."}}})
	case adapters.ErrAuth:
		writeJSON(w, 401, map[string]any{"errors": []map[string]string{{"message": "Unauthorized"}}})
	case adapters.ErrInvalidRequest:
		writeJSON(w, 400, map[string]any{"errors": []map[string]any{{"message": `Variable "$input" got invalid value`, "extensions": map[string]string{"code": "BAD_USER_INPUT"}}}})
	case adapters.ErrRateLimited:
		w.Header().Set("Retry-After", "1")
		writeJSON(w, 429, map[string]any{"errors": []map[string]string{{"message": "Too many requests"}}})
	case adapters.ErrProviderDown:
		w.WriteHeader(502)
		w.Write([]byte("<html>502 Bad Gateway</html>")) //nolint:errcheck // the client may be gone
	case adapters.ErrNotFound:
		writeJSON(w, 200, map[string]any{"data": map[string]any{"pod": nil}})
	}
}

func (f *fakeRunPod) lowestPrice(w http.ResponseWriter, vars map[string]json.RawMessage) {
	var id string
	var in struct {
		GPUCount     int    `json:"gpuCount"`
		DataCenterID string `json:"dataCenterId"`
		SecureCloud  bool   `json:"secureCloud"`
	}
	json.Unmarshal(vars["id"], &id)    //nolint:errcheck // checked below
	json.Unmarshal(vars["price"], &in) //nolint:errcheck // checked below
	var types []map[string]any
	keys := make([]string, 0, len(f.prices))
	for k := range f.prices {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k != fmt.Sprintf("%s|%s|%t", id, in.DataCenterID, in.SecureCloud) {
			continue
		}
		p := f.prices[k]
		mem, name := 80, "H100 80GB HBM3"
		if id == "NVIDIA A40" {
			mem, name = 48, "A40"
		}
		types = append(types, map[string]any{"id": id, "displayName": name, "memoryInGb": mem, "lowestPrice": map[string]any{
			"minimumBidPrice": p.minBid, "uninterruptablePrice": p.onDemand, "stockStatus": p.stock,
			"minVcpu": p.vcpu * in.GPUCount, "minMemory": p.memory * in.GPUCount}})
	}
	if types == nil {
		types = []map[string]any{}
	}
	writeJSON(w, 200, map[string]any{"data": map[string]any{"gpuTypes": types}})
}

func (f *fakeRunPod) create(w http.ResponseWriter, op string, vars map[string]json.RawMessage) {
	var in struct {
		Name, ImageName, GPUTypeID, CloudType, DataCenterID, DockerArgs string
		GPUCount                                                        int
		BidPerGpu                                                       json.Number
		Env                                                             []struct{ Key, Value string }
	}
	if err := json.Unmarshal(vars["input"], &in); err != nil || in.Name == "" || in.ImageName == "" || in.GPUTypeID == "" {
		writeJSON(w, 400, map[string]any{"errors": []map[string]any{{"message": `Variable "$input" got invalid value`, "extensions": map[string]string{"code": "BAD_USER_INPUT"}}}})
		return
	}
	field := "podFindAndDeployOnDemand"
	price := f.prices[fmt.Sprintf("%s|%s|%t", in.GPUTypeID, in.DataCenterID, in.CloudType == "SECURE")]
	cost := fmt.Sprintf("%.2f", *price.onDemand*float64(in.GPUCount))
	if op == "Rent" {
		field = "podRentInterruptable"
		bid, err := in.BidPerGpu.Float64()
		if err != nil || price.minBid == nil || bid < *price.minBid {
			writeJSON(w, 200, map[string]any{"data": map[string]any{field: nil},
				"errors": []map[string]any{{"message": "There are no longer any instances available with the requested specifications. Please refresh and try again."}}})
			return
		}
		cost = fmt.Sprintf("%.3f", bid*float64(in.GPUCount))
	}
	f.rented++
	p := &fakePod{id: fmt.Sprintf("pod%011d", f.rented), name: in.Name, status: "RUNNING", image: in.ImageName, args: in.DockerArgs,
		gpuType: in.GPUTypeID, dc: in.DataCenterID, env: map[string]string{}, bid: in.BidPerGpu, cost: cost}
	for _, e := range in.Env {
		p.env[e.Key] = e.Value
	}
	f.pods[p.id] = p
	f.order = append(f.order, p.id)
	if f.drop {
		f.drop = false
		w.WriteHeader(502)
		return
	}
	writeJSON(w, 200, map[string]any{"data": map[string]any{field: p.json()}})
}

func (p *fakePod) json() map[string]any {
	out := map[string]any{"id": p.id, "name": p.name, "desiredStatus": p.status, "costPerHr": json.Number(p.cost), "runtime": nil}
	if !p.booted.IsZero() && p.status == "RUNNING" {
		out["runtime"] = map[string]any{"uptimeInSeconds": int(time.Since(p.booted).Seconds())}
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body) //nolint:errcheck // the client may be gone
}
