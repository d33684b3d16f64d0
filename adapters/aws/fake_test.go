package aws_test

import (
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/adaptertest"
)

// fakeEC2 mimics the EC2 Query API (version 2016-11-15) as the API
// reference documents it, for the actions the adapter calls: form-encoded
// POSTs with Action and Version, lists flattened as Name.N, a SigV4
// Authorization header (its region is read from the credential scope; the
// signature itself is not checked), XML answers in the documented element
// names, errors as <Response><Errors><Error><Code>… with the documented
// HTTP status (InsufficientInstanceCapacity and InternalError 500,
// RequestLimitExceeded and Unavailable 503, AuthFailure 401, the rest
// 400). Assumed where the reference is silent: ids and tokens are random
// hex; a set page size paginates every Describe action (real EC2 pages
// DescribeInstances only when MaxResults is sent).
type fakeEC2 struct {
	*httptest.Server
	t *testing.T

	mu        sync.Mutex
	types     map[string]fakeType            // instance type → hardware
	offerings map[string]map[string][]string // region → type → zones
	spot      map[string]map[string]string   // region → "type zone" → price
	instances map[string]*fakeInstance
	order     []string
	byToken   map[string]string
	failures  map[adaptertest.Op][]error
	drop      bool
	pageSize  int
	calls     map[adaptertest.Op][]time.Time
	seq       int
}

type fakeType struct {
	vcpus, memMiB, gpuCount, gpuMemMiB int
	gpuName                            string
}

type fakeInstance struct {
	id, region, itype, zone, state, token, lifecycle, reason, userData string
	tags                                                               map[string]string
	launched                                                           time.Time
}

func newFakeEC2(t *testing.T) *fakeEC2 {
	f := &fakeEC2{t: t,
		types: map[string]fakeType{
			"p5.48xlarge": {vcpus: 192, memMiB: 2097152, gpuCount: 8, gpuMemMiB: 81920, gpuName: "H100"},
			"g6.xlarge":   {vcpus: 4, memMiB: 16384, gpuCount: 1, gpuMemMiB: 22888, gpuName: "L4"},
			"c7i.large":   {vcpus: 2, memMiB: 4096},
		},
		offerings: map[string]map[string][]string{
			"eu-central-1": {"p5.48xlarge": {"eu-central-1a", "eu-central-1b"}, "g6.xlarge": {"eu-central-1a", "eu-central-1b", "eu-central-1c"}},
			"eu-north-1":   {"c7i.large": {"eu-north-1a"}},
		},
		spot: map[string]map[string]string{
			"eu-central-1": {"p5.48xlarge eu-central-1a": "41.250000", "p5.48xlarge eu-central-1b": "39.875000",
				"g6.xlarge eu-central-1a": "0.325100", "g6.xlarge eu-central-1b": "0.301200", "g6.xlarge eu-central-1c": "0.298700"},
		},
		instances: map[string]*fakeInstance{}, byToken: map[string]string{},
		failures: map[adaptertest.Op][]error{}, calls: map[adaptertest.Op][]time.Time{},
	}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

// The adaptertest.Fake side.

func (f *fakeEC2) Fail(op adaptertest.Op, kind error, n int) bool {
	if _, ok := failCodes[kind]; !ok {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.failures[op] = append(f.failures[op], kind)
	}
	return true
}

// failCodes is how EC2 reports each kind: code and HTTP status.
var failCodes = map[error]struct {
	code   string
	status int
}{
	adapters.ErrCapacityUnavailable: {"InsufficientInstanceCapacity", 500},
	adapters.ErrQuotaExceeded:       {"VcpuLimitExceeded", 400},
	adapters.ErrAuth:                {"AuthFailure", 401},
	adapters.ErrInvalidRequest:      {"InvalidParameterValue", 400},
	adapters.ErrRateLimited:         {"RequestLimitExceeded", 503},
	adapters.ErrProviderDown:        {"InternalError", 500},
	adapters.ErrNotFound:            {"InvalidInstanceID.NotFound", 400},
}

func (f *fakeEC2) DropLaunchResponse() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drop = true
	return true
}

func (f *fakeEC2) Boot() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, i := range f.instances {
		switch i.state {
		case "pending":
			i.state = "running"
		case "shutting-down":
			i.state = "terminated"
		}
	}
}

func (f *fakeEC2) Rented() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.instances)
}

func (f *fakeEC2) Calls(op adaptertest.Op) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls[op])
}

func (f *fakeEC2) SetPageSize(n int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pageSize = n
	return true
}

// AddUnknownLocation makes every type of eu-central-1 available in the
// Warsaw Local Zone too, at a lower spot price: a zone of the Frankfurt
// region that is in Poland.
func (f *fakeEC2) AddUnknownLocation() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for t := range f.offerings["eu-central-1"] {
		f.offerings["eu-central-1"][t] = append(f.offerings["eu-central-1"][t], "eu-central-1-waw-1a")
		f.spot["eu-central-1"][t+" eu-central-1-waw-1a"] = "0.010000"
	}
	return true
}

// reclaim marks an instance reclaimed by EC2, as a spot interruption
// leaves it.
func (f *fakeEC2) reclaim(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, i := range f.instances {
		if i.id == id {
			i.state, i.reason = "terminated", "Server.SpotInstanceTermination"
		}
	}
}

func (f *fakeEC2) instance(id string) *fakeInstance {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.instances[id]
}

// The wire side.

var scopeRegion = regexp.MustCompile(`Credential=([^/]+)/\d{8}/([a-z0-9-]+)/ec2/aws4_request`)

func (f *fakeEC2) serve(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.Method != http.MethodPost {
		writeError(w, "InvalidParameterValue", "malformed request", 400)
		return
	}
	action := r.PostForm.Get("Action")
	if r.PostForm.Get("Version") != "2016-11-15" {
		writeError(w, "InvalidParameterValue", "unsupported Version", 400)
		return
	}
	m := scopeRegion.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil || m[1] != "AKIDEXAMPLE" {
		writeError(w, "AuthFailure", "AWS was not able to validate the provided access credentials", 401)
		return
	}
	region := m[2]
	op := opOf(action, r.PostForm)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[op] = append(f.calls[op], time.Now())
	if q := f.failures[op]; len(q) > 0 {
		f.failures[op] = q[1:]
		c := failCodes[q[0]]
		writeError(w, c.code, "injected "+c.code, c.status)
		return
	}
	switch action {
	case "DescribeInstanceTypes":
		f.describeTypes(w, r.PostForm)
	case "DescribeInstanceTypeOfferings":
		f.describeOfferings(w, region, r.PostForm)
	case "DescribeSpotPriceHistory":
		f.describeSpot(w, region, r.PostForm)
	case "RunInstances":
		f.run(w, region, r.PostForm)
	case "DescribeInstances":
		f.describeInstances(w, region, r.PostForm)
	case "TerminateInstances":
		f.terminate(w, region, r.PostForm)
	default:
		writeError(w, "InvalidAction", "The action "+action+" is not valid for this web service.", 400)
	}
}

func opOf(action string, form map[string][]string) adaptertest.Op {
	switch action {
	case "RunInstances":
		return adaptertest.OpLaunch
	case "TerminateInstances":
		return adaptertest.OpTerminate
	case "DescribeInstances":
		if _, ok := form["InstanceId.1"]; ok {
			return adaptertest.OpDescribe
		}
		return adaptertest.OpList
	}
	return adaptertest.OpOffers
}

func writeError(w http.ResponseWriter, code, msg string, status int) {
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>%s</RequestID></Response>`,
		code, xmlEscape(msg), "ea966190-f9aa-478e-9ede-example")
}

func xmlEscape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s)) //nolint:errcheck // a strings.Builder does not fail
	return b.String()
}

func writeXML(w http.ResponseWriter, root string, body any) {
	var buf strings.Builder
	err := xml.NewEncoder(&buf).EncodeElement(body, xml.StartElement{Name: xml.Name{Local: "body"}})
	out := strings.TrimSuffix(strings.TrimPrefix(buf.String(), "<body>"), "</body>")
	if err != nil {
		writeError(w, "InternalError", err.Error(), 500)
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<%s xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>59dbff89-35bd-4eac-99ed-be587EXAMPLE</requestId>%s</%s>`, root, out, root)
}

// list reads a flattened list parameter: Name.1, Name.2, …
func list(form map[string][]string, name string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := form[name+"."+strconv.Itoa(i)]
		if !ok {
			return out
		}
		out = append(out, v[0])
	}
}

// filters reads Filter.N.Name and Filter.N.Value.M.
func filters(form map[string][]string) map[string][]string {
	out := map[string][]string{}
	for i := 1; ; i++ {
		name, ok := form["Filter."+strconv.Itoa(i)+".Name"]
		if !ok {
			return out
		}
		out[name[0]] = list(form, "Filter."+strconv.Itoa(i)+".Value")
	}
}

// page cuts items to the page NextToken asks for.
func page[T any](f *fakeEC2, form map[string][]string, items []T) ([]T, string) {
	start, _ := strconv.Atoi(first(form["NextToken"]))
	size := f.pageSize
	if size == 0 {
		size = 1000
	}
	if start > len(items) {
		start = len(items)
	}
	end := min(start+size, len(items))
	next := ""
	if end < len(items) {
		next = strconv.Itoa(end)
	}
	return items[start:end], next
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

type xGPU struct {
	Name         string `xml:"name"`
	Manufacturer string `xml:"manufacturer"`
	Count        int    `xml:"count"`
	MemMiB       int    `xml:"memoryInfo>sizeInMiB"`
}

type xTypeInfo struct {
	InstanceType string `xml:"instanceType"`
	VCPUs        int    `xml:"vCpuInfo>defaultVCpus"`
	MemMiB       int    `xml:"memoryInfo>sizeInMiB"`
	GPUs         []xGPU `xml:"gpuInfo>gpus>item,omitempty"`
}

func (f *fakeEC2) describeTypes(w http.ResponseWriter, form map[string][]string) {
	want := list(form, "InstanceType")
	var items []xTypeInfo
	names := make([]string, 0, len(f.types))
	for n := range f.types {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if len(want) > 0 && !slices.Contains(want, n) {
			continue
		}
		t := f.types[n]
		it := xTypeInfo{InstanceType: n, VCPUs: t.vcpus, MemMiB: t.memMiB}
		if t.gpuCount > 0 {
			it.GPUs = []xGPU{{Name: t.gpuName, Manufacturer: "NVIDIA", Count: t.gpuCount, MemMiB: t.gpuMemMiB}}
		}
		items = append(items, it)
	}
	for _, n := range want {
		if _, ok := f.types[n]; !ok {
			writeError(w, "InvalidInstanceType", "The following supplied instance types do not exist: ["+n+"]", 400)
			return
		}
	}
	items, next := page(f, form, items)
	writeXML(w, "DescribeInstanceTypesResponse", struct {
		Items []xTypeInfo `xml:"instanceTypeSet>item"`
		Next  string      `xml:"nextToken,omitempty"`
	}{items, next})
}

type xOffering struct {
	InstanceType string `xml:"instanceType"`
	LocationType string `xml:"locationType"`
	Location     string `xml:"location"`
}

func (f *fakeEC2) describeOfferings(w http.ResponseWriter, region string, form map[string][]string) {
	if lt := first(form["LocationType"]); lt != "availability-zone" {
		writeError(w, "InvalidParameterValue", "the adapter asks for zones, got LocationType "+lt, 400)
		return
	}
	want := filters(form)["instance-type"]
	var items []xOffering
	var typeNames []string
	for t := range f.offerings[region] {
		typeNames = append(typeNames, t)
	}
	sort.Strings(typeNames)
	for _, t := range typeNames {
		if len(want) > 0 && !slices.Contains(want, t) {
			continue
		}
		for _, z := range f.offerings[region][t] {
			items = append(items, xOffering{InstanceType: t, LocationType: "availability-zone", Location: z})
		}
	}
	items, next := page(f, form, items)
	writeXML(w, "DescribeInstanceTypeOfferingsResponse", struct {
		Items []xOffering `xml:"instanceTypeOfferingSet>item"`
		Next  string      `xml:"nextToken,omitempty"`
	}{items, next})
}

type xSpotPrice struct {
	InstanceType       string `xml:"instanceType"`
	ProductDescription string `xml:"productDescription"`
	SpotPrice          string `xml:"spotPrice"`
	Timestamp          string `xml:"timestamp"`
	AvailabilityZone   string `xml:"availabilityZone"`
}

func (f *fakeEC2) describeSpot(w http.ResponseWriter, region string, form map[string][]string) {
	types := list(form, "InstanceType")
	zone := first(form["AvailabilityZone"])
	if pd := list(form, "ProductDescription"); len(pd) != 1 || pd[0] != "Linux/UNIX" {
		writeError(w, "InvalidParameterValue", "want ProductDescription.1=Linux/UNIX", 400)
		return
	}
	var keys []string
	for k := range f.spot[region] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var items []xSpotPrice
	for _, k := range keys {
		t, z, _ := strings.Cut(k, " ")
		if (len(types) > 0 && !slices.Contains(types, t)) || (zone != "" && z != zone) {
			continue
		}
		// An older price first: the adapter must keep the latest.
		items = append(items,
			xSpotPrice{t, "Linux/UNIX", "999.000000", time.Now().Add(-3 * time.Hour).UTC().Format(time.RFC3339), z},
			xSpotPrice{t, "Linux/UNIX", f.spot[region][k], time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), z})
	}
	items, next := page(f, form, items)
	writeXML(w, "DescribeSpotPriceHistoryResponse", struct {
		Items []xSpotPrice `xml:"spotPriceHistorySet>item"`
		Next  string       `xml:"nextToken,omitempty"`
	}{items, next})
}

type xTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type xInstance struct {
	InstanceID   string `xml:"instanceId"`
	ImageID      string `xml:"imageId"`
	StateCode    int    `xml:"instanceState>code"`
	StateName    string `xml:"instanceState>name"`
	ReasonCode   string `xml:"stateReason>code,omitempty"`
	ReasonMsg    string `xml:"stateReason>message,omitempty"`
	InstanceType string `xml:"instanceType"`
	LaunchTime   string `xml:"launchTime"`
	Zone         string `xml:"placement>availabilityZone"`
	Lifecycle    string `xml:"instanceLifecycle,omitempty"`
	ClientToken  string `xml:"clientToken"`
	Tags         []xTag `xml:"tagSet>item"`
}

type xReservation struct {
	ReservationID string      `xml:"reservationId"`
	OwnerID       string      `xml:"ownerId"`
	Instances     []xInstance `xml:"instancesSet>item"`
}

var stateCodes = map[string]int{"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}

func (i *fakeInstance) xml() xInstance {
	x := xInstance{InstanceID: i.id, ImageID: "ami-0123456789abcdef0", StateCode: stateCodes[i.state], StateName: i.state,
		InstanceType: i.itype, LaunchTime: i.launched.UTC().Format("2006-01-02T15:04:05.000Z"), Zone: i.zone,
		Lifecycle: i.lifecycle, ClientToken: i.token}
	if i.reason != "" {
		x.ReasonCode, x.ReasonMsg = i.reason, i.reason+": Spot instance termination"
	}
	keys := make([]string, 0, len(i.tags))
	for k := range i.tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		x.Tags = append(x.Tags, xTag{k, i.tags[k]})
	}
	return x
}

func (f *fakeEC2) run(w http.ResponseWriter, region string, form map[string][]string) {
	token := first(form["ClientToken"])
	if id, ok := f.byToken[token]; ok && token != "" {
		// EC2's idempotency: the same token returns the first result.
		writeXML(w, "RunInstancesResponse", xReservation{"r-" + id[2:], "123456789012", []xInstance{f.instances[id].xml()}})
		return
	}
	itype := first(form["InstanceType"])
	zones := f.offerings[region][itype]
	switch {
	case !strings.HasPrefix(first(form["ImageId"]), "ami-"):
		writeError(w, "MissingParameter", "The request must contain the parameter ImageId", 400)
		return
	case first(form["MinCount"]) != "1" || first(form["MaxCount"]) != "1":
		writeError(w, "InvalidParameterValue", "the adapter launches one instance at a time", 400)
		return
	case len(zones) == 0:
		writeError(w, "Unsupported", "The requested configuration is currently not supported.", 400)
		return
	case first(form["MetadataOptions.HttpTokens"]) != "required":
		writeError(w, "InvalidParameterValue", "the worker's notice watcher needs IMDSv2 (HttpTokens required)", 400)
		return
	}
	userData, err := base64.StdEncoding.DecodeString(first(form["UserData"]))
	if err != nil {
		writeError(w, "InvalidParameterValue", "Invalid BASE64 encoding of user data", 400)
		return
	}
	zone := zones[0]
	if z := first(form["Placement.AvailabilityZone"]); z != "" {
		if !slices.Contains(zones, z) {
			writeError(w, "InvalidParameterValue", "Invalid availability zone: ["+z+"]", 400)
			return
		}
		zone = z
	}
	f.seq++
	inst := &fakeInstance{id: fmt.Sprintf("i-%017x", f.seq), region: region, itype: itype, zone: zone, state: "pending",
		token: token, userData: string(userData), tags: map[string]string{}, launched: time.Now()}
	if first(form["InstanceMarketOptions.MarketType"]) == "spot" {
		inst.lifecycle = "spot"
		if first(form["InstanceMarketOptions.SpotOptions.SpotInstanceType"]) != "one-time" ||
			first(form["InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior"]) != "terminate" {
			writeError(w, "InvalidParameterCombination", "the adapter asks for one-time spot instances terminated on interruption", 400)
			return
		}
	}
	for i := 1; ; i++ {
		p := "TagSpecification." + strconv.Itoa(i)
		rt, ok := form[p+".ResourceType"]
		if !ok {
			break
		}
		if rt[0] != "instance" {
			continue
		}
		for j := 1; ; j++ {
			k, ok := form[p+".Tag."+strconv.Itoa(j)+".Key"]
			if !ok {
				break
			}
			inst.tags[k[0]] = first(form[p+".Tag."+strconv.Itoa(j)+".Value"])
		}
	}
	f.instances[inst.id] = inst
	f.order = append(f.order, inst.id)
	if token != "" {
		f.byToken[token] = inst.id
	}
	if f.drop {
		f.drop = false
		writeError(w, "InternalError", "An internal error has occurred", 500)
		return
	}
	writeXML(w, "RunInstancesResponse", xReservation{"r-" + inst.id[2:], "123456789012", []xInstance{inst.xml()}})
}

func (f *fakeEC2) describeInstances(w http.ResponseWriter, region string, form map[string][]string) {
	ids := list(form, "InstanceId")
	flt := filters(form)
	for name := range flt {
		if name != "client-token" && !strings.HasPrefix(name, "tag:") {
			writeError(w, "InvalidParameterValue", "The filter '"+name+"' is invalid", 400)
			return
		}
	}
	for _, id := range ids {
		if i, ok := f.instances[id]; !ok || i.region != region {
			writeError(w, "InvalidInstanceID.NotFound", "The instance ID '"+id+"' does not exist", 400)
			return
		}
	}
	var res []xReservation
	for _, id := range f.order {
		i := f.instances[id]
		if i.region != region || (len(ids) > 0 && !slices.Contains(ids, id)) {
			continue
		}
		match := true
		for name, values := range flt {
			v := i.token
			if key, ok := strings.CutPrefix(name, "tag:"); ok {
				var has bool
				if v, has = i.tags[key]; !has {
					match = false
				}
			}
			if !slices.Contains(values, v) {
				match = false
			}
		}
		if match {
			res = append(res, xReservation{"r-" + id[2:], "123456789012", []xInstance{i.xml()}})
		}
	}
	res, next := page(f, form, res)
	writeXML(w, "DescribeInstancesResponse", struct {
		Items []xReservation `xml:"reservationSet>item"`
		Next  string         `xml:"nextToken,omitempty"`
	}{res, next})
}

func (f *fakeEC2) terminate(w http.ResponseWriter, region string, form map[string][]string) {
	type change struct {
		InstanceID string `xml:"instanceId"`
		CurCode    int    `xml:"currentState>code"`
		CurName    string `xml:"currentState>name"`
		PrevCode   int    `xml:"previousState>code"`
		PrevName   string `xml:"previousState>name"`
	}
	var changes []change
	for _, id := range list(form, "InstanceId") {
		i, ok := f.instances[id]
		if !ok || i.region != region {
			writeError(w, "InvalidInstanceID.NotFound", "The instance ID '"+id+"' does not exist", 400)
			return
		}
		prev := i.state
		if i.state != "terminated" {
			i.state = "shutting-down"
		}
		changes = append(changes, change{id, stateCodes[i.state], i.state, stateCodes[prev], prev})
	}
	writeXML(w, "TerminateInstancesResponse", struct {
		Items []change `xml:"instancesSet>item"`
	}{changes})
}
