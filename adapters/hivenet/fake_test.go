package hivenet_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/adaptertest"
)

// fakeHivenet mimics the Hive Compute public API as its reference
// documents it: a bearer API key; presets and instances listed with cursor
// pagination ({"data": [...], "pagination": {"next": …}}, size ≤ 200);
// preset sizes as numeric strings and prices as decimal strings, an empty
// price_discounted meaning no discount; creates that are not idempotent and
// answer the instance with its hourly_rate; a retired preset answering 404;
// the lifecycle states CREATED … TERMINATED; errors in one envelope
// {"error": {"code", "message"}}.
//
// Assumed where the reference is silent: the error codes' names, 409 for a
// create refused for lack of capacity, 429 with Retry-After in seconds,
// POST /instances/{id}/terminate, cloud-init in the create body's
// user_data, and created_at on instances.
type fakeHivenet struct {
	srv *httptest.Server
	key string

	mu        sync.Mutex
	presets   []map[string]any
	instances []map[string]any
	pageSize  int // the most items a page holds, whatever size asks
	nextID    int
	faults    map[adaptertest.Op][]error
	dropNext  bool
	calls     map[adaptertest.Op][]time.Time
	created   int
	// presetReads counts GET /presets calls, creates records how many had
	// happened at each create.
	presetReads int
	creates     []int
	bodies      []map[string]any
}

func newFakeHivenet(t *testing.T) *fakeHivenet {
	f := &fakeHivenet{key: "hk_live_supersecret_key", pageSize: 200, faults: map[adaptertest.Op][]error{}, calls: map[adaptertest.Op][]time.Time{},
		presets: []map[string]any{
			{"id": "p-1", "sku": "1x-RTX-4090", "region": "FR", "location": "paris-1", "gpu_model": "RTX 4090", "gpu_count": 1,
				"cpu": "8", "memory": "48", "storage": "250", "hourly_price": "0.49", "price_discounted": ""},
			{"id": "p-2", "sku": "8x-RTX-4090", "region": "FR", "location": "paris-1", "gpu_model": "RTX 4090", "gpu_count": 8,
				"cpu": "64", "memory": "384", "storage": "2000", "hourly_price": "3.92", "price_discounted": "3.50"},
			{"id": "p-3", "sku": "1x-RTX-5090", "region": "UAE", "location": "dubai-1", "gpu_model": "RTX 5090", "gpu_count": 1,
				"cpu": "16", "memory": "64", "storage": "500", "hourly_price": "0.79", "price_discounted": ""},
			{"id": "p-4", "sku": "1x-RTX-4090", "region": "US", "location": "dallas-1", "gpu_model": "RTX 4090", "gpu_count": 1,
				"cpu": "8", "memory": "48", "storage": "250", "hourly_price": "0.55", "price_discounted": ""},
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
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func answer(w http.ResponseWriter, kind error) {
	switch kind {
	case adapters.ErrAuth:
		writeError(w, 401, "unauthorized", "Invalid API key")
	case adapters.ErrQuotaExceeded:
		writeError(w, 402, "insufficient_credit", "Not enough credit for one hour of this preset")
	case adapters.ErrInvalidRequest:
		writeError(w, 400, "invalid_request", "The image is not compatible with the preset")
	case adapters.ErrNotFound:
		writeError(w, 404, "not_found", "Instance not found")
	case adapters.ErrCapacityUnavailable:
		writeError(w, 409, "no_capacity", "No capacity for this preset")
	case adapters.ErrRateLimited:
		w.Header().Set("Retry-After", "1")
		writeError(w, 429, "rate_limited", "Too many requests")
	default:
		writeError(w, 503, "unavailable", "Service unavailable")
	}
}

func (f *fakeHivenet) op(r *http.Request) adaptertest.Op {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/presets":
		return adaptertest.OpOffers
	case r.Method == http.MethodPost && r.URL.Path == "/instances":
		return adaptertest.OpLaunch
	case r.Method == http.MethodGet && r.URL.Path == "/instances":
		return adaptertest.OpList
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/instances/"):
		return adaptertest.OpDescribe
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/terminate"):
		return adaptertest.OpTerminate
	}
	return ""
}

// paginate cuts items at the cursor, answering the documented envelope.
func (f *fakeHivenet) paginate(w http.ResponseWriter, r *http.Request, items []map[string]any) {
	size := 50
	if s := r.URL.Query().Get("size"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 200 {
			writeError(w, 400, "invalid_request", "size must be between 1 and 200")
			return
		}
		size = n
	}
	size = min(size, f.pageSize)
	from := 0
	if c := r.URL.Query().Get("cursor"); c != "" {
		b, err := base64.RawURLEncoding.DecodeString(c)
		n, err2 := strconv.Atoi(string(b))
		if err != nil || err2 != nil || n < 0 || n > len(items) {
			writeError(w, 400, "invalid_request", "invalid cursor")
			return
		}
		from = n
	}
	to := min(from+size, len(items))
	var next any
	if to < len(items) {
		next = base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(to)))
	}
	data := items[from:to]
	if data == nil {
		data = []map[string]any{}
	}
	writeJSON(w, 200, map[string]any{"data": data, "pagination": map[string]any{"next": next}})
}

func (f *fakeHivenet) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+f.key {
		writeError(w, 401, "unauthorized", "Invalid API key")
		return
	}
	if op := f.op(r); op != "" {
		f.calls[op] = append(f.calls[op], time.Now())
		if fs := f.faults[op]; len(fs) > 0 {
			f.faults[op] = fs[1:]
			answer(w, fs[0])
			return
		}
	}
	switch {
	case r.URL.Path == "/regions":
		writeJSON(w, 200, map[string]any{"data": []map[string]string{{"code": "FR"}, {"code": "UAE"}, {"code": "US"}}})
	case r.URL.Path == "/presets":
		f.presetReads++
		f.paginate(w, r, f.presets)
	case r.URL.Path == "/instances" && r.Method == http.MethodGet:
		var live []map[string]any
		for _, in := range f.instances {
			if in["status"] != "TERMINATED" {
				live = append(live, in)
			}
		}
		f.paginate(w, r, live)
	case r.URL.Path == "/instances" && r.Method == http.MethodPost:
		f.create(w, r)
	case strings.HasSuffix(r.URL.Path, "/terminate") && r.Method == http.MethodPost:
		in := f.find(strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/instances/"), "/terminate"))
		if in == nil {
			writeError(w, 404, "not_found", "Instance not found")
			return
		}
		if in["status"] != "TERMINATED" {
			in["status"] = "TERMINATING"
		}
		writeJSON(w, 202, in)
	case strings.HasPrefix(r.URL.Path, "/instances/") && r.Method == http.MethodGet:
		in := f.find(strings.TrimPrefix(r.URL.Path, "/instances/"))
		if in == nil {
			writeError(w, 404, "not_found", "Instance not found")
			return
		}
		writeJSON(w, 200, in)
	default:
		writeError(w, 404, "not_found", "no route")
	}
}

func (f *fakeHivenet) find(id string) map[string]any {
	for _, in := range f.instances {
		if in["instance_id"] == id {
			return in
		}
	}
	return nil
}

func (f *fakeHivenet) create(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if json.NewDecoder(r.Body).Decode(&body) != nil {
		writeError(w, 400, "invalid_request", "body is not valid JSON")
		return
	}
	f.bodies = append(f.bodies, body)
	f.creates = append(f.creates, f.presetReads)
	var ps map[string]any
	for _, p := range f.presets {
		if p["id"] == body["preset_id"] {
			ps = p
		}
	}
	switch {
	case ps == nil:
		writeError(w, 404, "not_found", "Preset not found")
		return
	case body["image_id"] == "" || body["image_type"] == "" || body["name"] == "":
		writeError(w, 400, "invalid_request", "The image is not compatible with the preset")
		return
	}
	price := ps["hourly_price"]
	if d := ps["price_discounted"]; d != "" {
		price = d
	}
	f.nextID++
	f.created++
	in := map[string]any{"instance_id": fmt.Sprintf("0000-%04d", f.nextID), "name": body["name"], "status": "CREATED",
		"region": ps["region"], "gpu_type": ps["gpu_model"], "size": ps["sku"], "cpu_count": 8,
		"hourly_rate": json.Number(fmt.Sprint(price)), "created_at": time.Now().UTC().Format(time.RFC3339Nano), "started_at": nil}
	f.instances = append(f.instances, in)
	if f.dropNext {
		f.dropNext = false
		writeError(w, 504, "timeout", "Gateway timeout")
		return
	}
	writeJSON(w, 201, in)
}

// The adaptertest.Fake side.

func (f *fakeHivenet) Fail(op adaptertest.Op, kind error, n int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.faults[op] = append(f.faults[op], kind)
	}
	return true
}

func (f *fakeHivenet) DropLaunchResponse() bool {
	f.mu.Lock()
	f.dropNext = true
	f.mu.Unlock()
	return true
}

func (f *fakeHivenet) Boot() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, in := range f.instances {
		switch in["status"] {
		case "CREATED", "DEPLOYED", "STARTING":
			in["status"] = "RUNNING"
		case "TERMINATING":
			in["status"] = "TERMINATED"
		}
	}
}

func (f *fakeHivenet) Rented() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.created
}

func (f *fakeHivenet) Calls(op adaptertest.Op) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.calls[op]...)
}

func (f *fakeHivenet) SetPageSize(n int) bool {
	f.mu.Lock()
	f.pageSize = n
	f.mu.Unlock()
	return true
}

func (f *fakeHivenet) AddUnknownLocation() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.presets = append(f.presets, map[string]any{"id": "p-9", "sku": "1x-H100", "region": "APAC", "location": "tokyo-1",
		"gpu_model": "H100", "gpu_count": 1, "cpu": "16", "memory": "128", "storage": "500", "hourly_price": "1.99", "price_discounted": ""})
	return true
}
