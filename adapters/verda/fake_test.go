package verda_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/adaptertest"
)

// fakeVerda mimics the Verda public API as its documentation and SDKs
// describe it: OAuth2 client credentials and refresh tokens at
// /oauth2/token, bearer tokens on every other call, errors as
// {"code", "message"} with the SDKs' codes, instance types with prices as
// strings, locations with their country, availability per location and
// spot flag, startup scripts and deploys answered by the new id as plain
// text, and actions through PUT /instances.
//
// Assumed where the documents are silent: the status code of each error
// code (400 invalid_request, 401 unauthorized_request, 402
// insufficient_funds, 404 not_found, 503 service_unavailable), and 429
// with Retry-After in seconds for throttling.
type fakeVerda struct {
	t      *testing.T
	srv    *httptest.Server
	id     string
	secret string
	// tokenTTL is expires_in of the tokens it issues.
	tokenTTL time.Duration

	mu        sync.Mutex
	access    map[string]time.Time // token → expiry
	refresh   map[string]bool
	grants    []string // grant types asked for, in order
	nextID    int
	instances map[string]*fakeInstance
	order     []string
	scripts   map[string]string
	locations []map[string]string
	faults    map[adaptertest.Op][]error
	dropNext  bool
	calls     map[adaptertest.Op][]time.Time
	created   int
	// bodies are the create bodies received, for assertions.
	bodies []map[string]any
}

type fakeInstance struct {
	ID, Type, Status, Hostname, Location, ScriptID string
	Spot                                           bool
	Price                                          string
	Created                                        time.Time
	Tags                                           []map[string]string
}

var fakeTypes = []map[string]any{
	{"id": "t1", "instance_type": "1V100.6V", "price_per_hour": "0.89", "spot_price": "0.27", "currency": "eur",
		"cpu": map[string]any{"description": "6 CPU", "number_of_cores": 6}, "gpu": map[string]any{"description": "1x V100", "number_of_gpus": 1},
		"memory": map[string]any{"size_in_gigabytes": 23}, "gpu_memory": map[string]any{"size_in_gigabytes": 16}, "storage": map[string]any{}},
	{"id": "t2", "instance_type": "8H100.80S.176V", "price_per_hour": 19.92, "spot_price": "6.0", "currency": "eur",
		"cpu": map[string]any{"number_of_cores": 176}, "gpu": map[string]any{"number_of_gpus": 8},
		"memory": map[string]any{"size_in_gigabytes": 1480}, "gpu_memory": map[string]any{"size_in_gigabytes": 640}, "storage": map[string]any{}},
	{"id": "t3", "instance_type": "CPU.4V.16G", "price_per_hour": "0.0315", "currency": "eur",
		"cpu": map[string]any{"number_of_cores": 4}, "gpu": map[string]any{"number_of_gpus": 0},
		"memory": map[string]any{"size_in_gigabytes": 16}, "gpu_memory": map[string]any{"size_in_gigabytes": 0}, "storage": map[string]any{}},
}

func newFakeVerda(t *testing.T) *fakeVerda {
	f := &fakeVerda{t: t, id: "client-id-1", secret: "very-secret-client-secret", tokenTTL: time.Hour,
		access: map[string]time.Time{}, refresh: map[string]bool{}, instances: map[string]*fakeInstance{},
		scripts: map[string]string{}, faults: map[adaptertest.Op][]error{}, calls: map[adaptertest.Op][]time.Time{},
		locations: []map[string]string{
			{"code": "FIN-01", "name": "Finland 1", "country_code": "FI"},
			{"code": "ICE-01", "name": "Iceland 1", "country_code": "IS"},
		}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) //nolint:errcheck // test server
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"code": code, "message": msg})
}

// answer writes the documented shape of kind.
func answer(w http.ResponseWriter, kind error) {
	switch kind {
	case adapters.ErrAuth:
		writeError(w, 401, "unauthorized_request", "Invalid or expired token")
	case adapters.ErrQuotaExceeded:
		writeError(w, 402, "insufficient_funds", "Not enough balance to deploy this instance")
	case adapters.ErrInvalidRequest:
		writeError(w, 400, "invalid_request", "Invalid instance type")
	case adapters.ErrNotFound:
		writeError(w, 404, "not_found", "Instance not found")
	case adapters.ErrRateLimited:
		w.Header().Set("Retry-After", "1")
		writeError(w, 429, "", "Too Many Requests")
	default:
		writeError(w, 503, "service_unavailable", "Service temporarily unavailable")
	}
}

func (f *fakeVerda) op(r *http.Request) adaptertest.Op {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/instance-types":
		return adaptertest.OpOffers
	case r.Method == http.MethodPost && r.URL.Path == "/instances":
		return adaptertest.OpLaunch
	case r.Method == http.MethodGet && r.URL.Path == "/instances":
		return adaptertest.OpList
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/instances/"):
		return adaptertest.OpDescribe
	case r.Method == http.MethodPut && r.URL.Path == "/instances":
		return adaptertest.OpTerminate
	}
	return ""
}

func (f *fakeVerda) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Path == "/oauth2/token" && r.Method == http.MethodPost {
		f.token(w, r)
		return
	}
	auth, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if exp, ok := f.access[auth]; !ok || time.Now().After(exp) {
		writeError(w, 401, "unauthorized_request", "Invalid or expired token")
		return
	}
	op := f.op(r)
	if op != "" {
		f.calls[op] = append(f.calls[op], time.Now())
		if fs := f.faults[op]; len(fs) > 0 && fs[0] != adapters.ErrCapacityUnavailable {
			f.faults[op] = fs[1:]
			answer(w, fs[0])
			return
		}
	}
	switch {
	case r.URL.Path == "/instance-types":
		writeJSON(w, 200, fakeTypes)
	case r.URL.Path == "/locations":
		writeJSON(w, 200, f.locations)
	case r.URL.Path == "/instance-availability":
		spot := r.URL.Query().Get("is_spot") == "true"
		var out []map[string]any
		for _, l := range f.locations {
			avail := []string{"1V100.6V", "CPU.4V.16G"}
			if !spot {
				avail = append(avail, "8H100.80S.176V")
			}
			out = append(out, map[string]any{"location_code": l["code"], "availabilities": avail})
		}
		writeJSON(w, 200, out)
	case strings.HasPrefix(r.URL.Path, "/instance-availability/"):
		if fs := f.faults[adaptertest.OpLaunch]; len(fs) > 0 && fs[0] == adapters.ErrCapacityUnavailable {
			f.faults[adaptertest.OpLaunch] = fs[1:]
			writeJSON(w, 200, false)
			return
		}
		writeJSON(w, 200, true)
	case r.URL.Path == "/scripts" && r.Method == http.MethodPost:
		var body struct{ Name, Script string }
		if json.NewDecoder(r.Body).Decode(&body) != nil || body.Name == "" || body.Script == "" {
			writeError(w, 400, "invalid_request", "name and script are required")
			return
		}
		f.nextID++
		id := fmt.Sprintf("script-%04d", f.nextID)
		f.scripts[id] = body.Script
		w.WriteHeader(201)
		fmt.Fprint(w, id)
	case strings.HasPrefix(r.URL.Path, "/scripts/") && r.Method == http.MethodDelete:
		delete(f.scripts, strings.TrimPrefix(r.URL.Path, "/scripts/"))
		w.WriteHeader(200)
	case r.URL.Path == "/instances" && r.Method == http.MethodPost:
		f.deploy(w, r)
	case r.URL.Path == "/instances" && r.Method == http.MethodGet:
		var out []map[string]any
		for _, id := range f.order {
			if in := f.instances[id]; in.Status != "deleted" {
				out = append(out, in.json())
			}
		}
		writeJSON(w, 200, out)
	case strings.HasPrefix(r.URL.Path, "/instances/") && r.Method == http.MethodGet:
		in, ok := f.instances[strings.TrimPrefix(r.URL.Path, "/instances/")]
		if !ok || in.Status == "deleted" {
			writeError(w, 404, "not_found", "Instance not found")
			return
		}
		writeJSON(w, 200, in.json())
	case r.URL.Path == "/instances" && r.Method == http.MethodPut:
		var body struct {
			Action string   `json:"action"`
			ID     []string `json:"id"`
		}
		if json.NewDecoder(r.Body).Decode(&body) != nil || len(body.ID) == 0 {
			writeError(w, 400, "invalid_request", "action and id are required")
			return
		}
		for _, id := range body.ID {
			in, ok := f.instances[id]
			if !ok || in.Status == "deleted" {
				writeError(w, 404, "not_found", "Instance not found")
				return
			}
			if body.Action != "delete" {
				writeError(w, 400, "invalid_request", "unsupported action in this fake")
				return
			}
			in.Status = "deleting"
		}
		w.WriteHeader(202)
	default:
		writeError(w, 404, "not_found", "no route")
	}
}

func (in *fakeInstance) json() map[string]any {
	return map[string]any{"id": in.ID, "instance_type": in.Type, "status": in.Status, "hostname": in.Hostname,
		"location": in.Location, "is_spot": in.Spot, "price_per_hour": json.Number(in.Price), "startup_script_id": in.ScriptID,
		"created_at": in.Created.UTC().Format(time.RFC3339Nano), "tags": in.Tags, "description": "", "ssh_key_ids": []string{}}
}

func (f *fakeVerda) token(w http.ResponseWriter, r *http.Request) {
	var body map[string]string
	if json.NewDecoder(r.Body).Decode(&body) != nil {
		writeError(w, 400, "invalid_request", "body is not valid JSON")
		return
	}
	f.grants = append(f.grants, body["grant_type"])
	switch body["grant_type"] {
	case "client_credentials":
		if body["client_id"] != f.id || body["client_secret"] != f.secret {
			writeError(w, 401, "unauthorized_request", "Invalid client credentials")
			return
		}
	case "refresh_token":
		if !f.refresh[body["refresh_token"]] {
			writeError(w, 400, "invalid_request", "Invalid refresh token")
			return
		}
		delete(f.refresh, body["refresh_token"])
	default:
		writeError(w, 400, "invalid_request", "unsupported grant type")
		return
	}
	f.nextID++
	access, refresh := fmt.Sprintf("access-%d", f.nextID), fmt.Sprintf("refresh-%d", f.nextID)
	f.access[access] = time.Now().Add(f.tokenTTL)
	f.refresh[refresh] = true
	writeJSON(w, 200, map[string]any{"access_token": access, "refresh_token": refresh, "token_type": "Bearer",
		"expires_in": int(f.tokenTTL / time.Second), "scope": "cloud-api-v1"})
}

func (f *fakeVerda) deploy(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if json.NewDecoder(r.Body).Decode(&body) != nil {
		writeError(w, 400, "invalid_request", "body is not valid JSON")
		return
	}
	f.bodies = append(f.bodies, body)
	typ, _ := body["instance_type"].(string)
	loc, _ := body["location_code"].(string)
	script, _ := body["startup_script_id"].(string)
	host, _ := body["hostname"].(string)
	var price string
	for _, t := range fakeTypes {
		if t["instance_type"] == typ {
			price = fmt.Sprint(t["price_per_hour"])
			if body["is_spot"] == true {
				price = fmt.Sprint(t["spot_price"])
			}
		}
	}
	switch {
	case price == "":
		writeError(w, 400, "invalid_request", "Invalid instance type")
		return
	case loc == "":
		writeError(w, 400, "invalid_request", "location_code is required")
		return
	case f.scripts[script] == "":
		writeError(w, 404, "not_found", "Startup script not found")
		return
	case host == "" || body["image"] == "":
		writeError(w, 400, "invalid_request", "hostname and image are required")
		return
	}
	var tags []map[string]string
	if raw, ok := body["tags"].([]any); ok {
		for _, t := range raw {
			m, _ := t.(map[string]any)
			tags = append(tags, map[string]string{"id": "tag", "key": fmt.Sprint(m["key"]), "value": fmt.Sprint(m["value"])})
		}
	}
	f.nextID++
	f.created++
	id := fmt.Sprintf("5b1a-%04d", f.nextID)
	f.instances[id] = &fakeInstance{ID: id, Type: typ, Status: "provisioning", Hostname: host, Location: loc, ScriptID: script,
		Spot: body["is_spot"] == true, Price: price, Created: time.Now(), Tags: tags}
	f.order = append(f.order, id)
	if f.dropNext {
		f.dropNext = false
		writeError(w, 504, "", "Gateway Timeout")
		return
	}
	w.WriteHeader(200)
	fmt.Fprint(w, id)
}

// The adaptertest.Fake side.

func (f *fakeVerda) Fail(op adaptertest.Op, kind error, n int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if kind == adapters.ErrCapacityUnavailable && op != adaptertest.OpLaunch {
		return false
	}
	for range n {
		f.faults[op] = append(f.faults[op], kind)
	}
	return true
}

func (f *fakeVerda) DropLaunchResponse() bool {
	f.mu.Lock()
	f.dropNext = true
	f.mu.Unlock()
	return true
}

func (f *fakeVerda) Boot() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, in := range f.instances {
		switch in.Status {
		case "provisioning":
			in.Status = "running"
		case "deleting":
			in.Status = "deleted"
		}
	}
}

func (f *fakeVerda) Rented() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.created
}

func (f *fakeVerda) Calls(op adaptertest.Op) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.calls[op]...)
}

// SetPageSize: Verda's instance listing is not paginated.
func (f *fakeVerda) SetPageSize(int) bool { return false }

func (f *fakeVerda) AddUnknownLocation() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.locations = append(f.locations, map[string]string{"code": "XYZ-01", "name": "New site", "country_code": ""})
	return true
}
