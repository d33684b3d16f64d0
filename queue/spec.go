package queue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/gpuq/gpuq/policy"
)

// MaxSpecBytes bounds a submitted spec; larger payloads are refused before
// they are parsed or published.
const MaxSpecBytes = 256 << 10

// Spec is what a user submits: a job and its requirements. It decodes from
// YAML or JSON strictly: unknown fields and wrong types are errors naming the
// field. The README's "Job spec" section documents every field.
type Spec struct {
	Name             string            `json:"name,omitempty"`
	Project          string            `json:"project,omitempty"`
	Command          Command           `json:"command"`
	Env              map[string]string `json:"env,omitempty"`
	Resources        Resources         `json:"resources,omitempty"`
	Placement        PlacementSpec     `json:"placement,omitempty"`
	Budget           BudgetSpec        `json:"budget,omitempty"`
	Retries          Retries           `json:"retries,omitempty"`
	Checkpoint       CheckpointSpec    `json:"checkpoint,omitempty"`
	IdempotencyKey   string            `json:"idempotency_key,omitempty"`
	Labels           map[string]string `json:"labels,omitempty"`
	Timeout          Duration          `json:"timeout,omitempty"`
	Deadline         *time.Time        `json:"deadline,omitempty"`
	ExpectedDuration Duration          `json:"expected_duration,omitempty"`
	Inputs           []Input           `json:"inputs,omitempty"`
	// Workdir names an uploaded directory the command runs in, unpacked:
	// "sha256:" and its archive's digest (see WorkdirPrefix).
	Workdir string `json:"workdir,omitempty"`
	// Secrets names secrets of the project (see Secret) the job receives
	// as environment variables of those names.
	Secrets []string `json:"secrets,omitempty"`
	// Notify posts the job's ends to a webhook (see Notify).
	Notify *Notify `json:"notify,omitempty"`
	// After names jobs of the project, by id, that must all succeed before
	// this one is placed (see StateWaiting).
	After []string `json:"after,omitempty"`
	// AfterEnded names jobs of the project, by id, that must all have
	// ended, however they ended, before this one is placed.
	AfterEnded []string `json:"after_ended,omitempty"`
}

// Command is the job's argv. A single string runs through /bin/sh -c.
type Command []string

// NoopCommand is the command of gpuq's one built-in job: the worker runs it
// in-process instead of starting a program, through the same fenced claim,
// durable success record and acknowledgement as any other job. It measures
// the queue's own cost per job and checks a pool end to end.
const NoopCommand = "gpuq:noop"

// builtinPrefix marks commands the worker runs in-process.
const builtinPrefix = "gpuq:"

// IsNoop reports whether the spec is the built-in no-op job.
func (s *Spec) IsNoop() bool { return len(s.Command) == 1 && s.Command[0] == NoopCommand }

// UnmarshalJSON accepts a list of strings or one shell string.
func (c *Command) UnmarshalJSON(b []byte) error {
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		// A list, as the client library and the HTTP API send it: not
		// tried as a string first (a failed decoding is not free).
		var list []string
		if err := json.Unmarshal(b, &list); err != nil {
			return errors.New("must be a string or a list of strings")
		}
		*c = list
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if s == "" {
			*c = nil
			return nil
		}
		*c = Command{"/bin/sh", "-c", s}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return errors.New("must be a string or a list of strings")
	}
	*c = list
	return nil
}

// Resources is what one run of the job needs.
type Resources struct {
	// GPU is absent for CPU-only jobs.
	GPU      *GPUSpec `json:"gpu,omitempty"`
	CPU      int      `json:"cpu,omitempty"`
	MemoryGB float64  `json:"memory_gb,omitempty"`
}

// GPUSpec asks for Count cards of one of Cards (in order of preference).
type GPUSpec struct {
	Count    int      `json:"count"`
	Cards    []string `json:"cards,omitempty"`
	MemoryGB int      `json:"memory_gb,omitempty"`
}

// PlacementSpec narrows where the job may run.
type PlacementSpec struct {
	// Tier is spot, on-demand or spot-then-on-demand (the default).
	Tier      string   `json:"tier,omitempty"`
	Regions   []string `json:"regions,omitempty"`
	Residency string   `json:"residency,omitempty"`
	Providers []string `json:"providers,omitempty"`
	// AllowGPUForCPU lets a CPU-only job use GPU pools as plan B, ranked
	// after every CPU pool.
	AllowGPUForCPU bool `json:"allow_gpu_for_cpu,omitempty"`
}

// BudgetSpec caps what the job may cost, as amounts like "2.50 EUR".
type BudgetSpec struct {
	MaxPricePerHour string `json:"max_price_per_hour,omitempty"`
	Total           string `json:"total,omitempty"`
}

// Retries bounds how often the job is run again.
type Retries struct {
	// MaxErrors is how many times a non-zero exit is retried. Default 2.
	MaxErrors *int `json:"max_errors,omitempty"`
	// MaxPreemptions is how many preemptions or lost workers the job
	// survives before it is declared dead. Default 20.
	MaxPreemptions *int `json:"max_preemptions,omitempty"`
	// Delay between an error and the retry. Default 10s.
	Delay Duration `json:"delay,omitempty"`
}

// CheckpointSpec says what the worker packs when the job commits a checkpoint.
type CheckpointSpec struct {
	// Paths inside GPUQ_CHECKPOINT_DIR to pack; default: all of it.
	Paths []string `json:"paths,omitempty"`
	// Interval is a hint to the job of how often to checkpoint; it is passed
	// as GPUQ_CHECKPOINT_INTERVAL (seconds).
	Interval Duration `json:"interval,omitempty"`
}

// Input is data the job reads: data a store holds, used to estimate
// egress cost, or the outputs of an earlier job of the project (Job),
// which the worker unpacks in $GPUQ_INPUT_DIR/<name> before the command
// runs.
type Input struct {
	Name string `json:"name,omitempty"`
	// Job names an earlier job of the project, by id, whose outputs the
	// job reads. Such an input holds only Name (default: the id) and Job;
	// the job runs after it (spec.after holds it unless
	// spec.after_ended does) and inside its residency.
	Job string `json:"job,omitempty"`
	URI string `json:"uri,omitempty"`
	// Provider stores the data and bills its egress; empty means any
	// provider with offers in Region.
	Provider string `json:"provider,omitempty"`
	Region   string `json:"region,omitempty"`
	// Country is the ISO 3166-1 alpha-2 code of Region, when the offers
	// there do not say it.
	Country string `json:"country,omitempty"`
	Bytes   int64  `json:"bytes,omitempty"`
}

// Duration is a time.Duration written as "90s", "2h30m".
type Duration time.Duration

// UnmarshalJSON parses a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`must be a duration string such as "90s" or "2h"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf(`must be a duration such as "90s" or "2h", got %q`, s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Defaults for fields a spec leaves out.
const (
	DefaultProject        = "default"
	DefaultTier           = "spot-then-on-demand"
	DefaultMaxErrors      = 2
	DefaultMaxPreemptions = 20
	DefaultRetryDelay     = 10 * time.Second
)

// MaxErrors returns retries.max_errors or its default.
func (s *Spec) MaxErrors() int { return intOr(s.Retries.MaxErrors, DefaultMaxErrors) }

// MaxPreemptions returns retries.max_preemptions or its default.
func (s *Spec) MaxPreemptions() int { return intOr(s.Retries.MaxPreemptions, DefaultMaxPreemptions) }

// RetryDelay returns retries.delay or its default.
func (s *Spec) RetryDelay() time.Duration {
	if s.Retries.Delay == 0 {
		return DefaultRetryDelay
	}
	return time.Duration(s.Retries.Delay)
}

func intOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// FieldError is one problem with one field of a spec.
type FieldError struct {
	Field   string
	Message string
}

func (e FieldError) Error() string { return e.Field + ": " + e.Message }

// SpecError lists everything wrong with a spec.
type SpecError struct {
	Problems []FieldError
}

func (e *SpecError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.Error()
	}
	return "invalid job spec: " + strings.Join(msgs, "; ")
}

// ErrInvalidSpec is wrapped by every spec error so callers can test for it.
var ErrInvalidSpec = errors.New("invalid job spec")

// Is makes errors.Is(err, ErrInvalidSpec) true for a SpecError.
func (e *SpecError) Is(target error) bool { return target == ErrInvalidSpec }

// yamlSpecErr turns CheckYAML's refusal into a spec error naming the field.
func yamlSpecErr(err error) error {
	var ye *YAMLError
	if !errors.As(err, &ye) {
		return specErr("spec", "%v", err)
	}
	msg := ye.Message
	if ye.Line > 0 {
		msg = fmt.Sprintf("line %d: %s", ye.Line, msg)
	}
	return specErr(ye.Field, "%s", msg)
}

func specErr(field, format string, args ...any) *SpecError {
	return &SpecError{Problems: []FieldError{{Field: field, Message: fmt.Sprintf(format, args...)}}}
}

// ParseSpec decodes a YAML or JSON spec strictly, applies defaults and
// validates it. Errors are *SpecError naming each field at fault.
//
// A JSON object (what queue.Submit, the HTTP API and the Python client
// send) is decoded as JSON directly: JSON has no aliases and its values
// mean the same as YAML's, so the two YAML passes would change nothing.
// Anything the JSON path does not accept goes through the YAML path, so
// that errors read the same whichever way a spec is written.
func ParseSpec(data []byte) (*Spec, error) {
	if err := checkSpecSize(data); err != nil {
		return nil, err
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, specErr("spec", "is empty")
	}
	if trimmed[0] == '{' && utf8.Valid(trimmed) && json.Valid(trimmed) {
		if s, err := decodeSpecJSON(trimmed); err == nil {
			return s, nil
		}
	}
	return parseSpecYAML(data)
}

func checkSpecSize(data []byte) error {
	if len(data) > MaxSpecBytes {
		return specErr("spec", "%d bytes is over the %d-byte limit; pass large data as inputs, not in the spec", len(data), MaxSpecBytes)
	}
	return nil
}

// parseSpecYAML reads data as YAML (JSON included), refusing aliases
// before anything expands them.
func parseSpecYAML(data []byte) (*Spec, error) {
	js, err := specYAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	return decodeSpecJSON(js)
}

func specYAMLToJSON(data []byte) ([]byte, error) {
	if err := CheckYAML(data, "spec"); err != nil {
		return nil, yamlSpecErr(err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, specErr("spec", "not valid YAML or JSON: %v", err)
	}
	return js, nil
}

// SpecDocument reads a spec file as ParseSpec does, as its fields, before
// any is checked or defaulted: a part of a spec that other fields will
// complete (gpuq submit -f job.yaml -- CMD takes the command from its
// arguments). ParseSpec checks the completed spec.
func SpecDocument(data []byte) (map[string]any, error) {
	if err := checkSpecSize(data); err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return map[string]any{}, nil
	}
	js, err := specYAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	var generic any
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber() // numbers as written, however large
	if err := dec.Decode(&generic); err != nil {
		return nil, specErr("spec", "not valid YAML or JSON: %v", err)
	}
	doc, ok := generic.(map[string]any)
	if !ok && generic != nil {
		return nil, specErr("spec", "must be a mapping of fields, got %s", jsonKind(generic))
	}
	if doc == nil {
		doc = map[string]any{}
	}
	return doc, nil
}

// decodeSpecJSON decodes, defaults and validates a spec written in JSON.
func decodeSpecJSON(js []byte) (*Spec, error) {
	var generic any
	if err := json.Unmarshal(js, &generic); err != nil {
		return nil, specErr("spec", "not valid YAML or JSON: %v", err)
	}
	if _, ok := generic.(map[string]any); !ok {
		return nil, specErr("spec", "must be a mapping of fields, got %s", jsonKind(generic))
	}
	if probs := checkShape("spec", generic, reflect.TypeOf(Spec{})); len(probs) > 0 {
		return nil, &SpecError{Problems: probs}
	}
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(js))
	if err := dec.Decode(&s); err != nil {
		return nil, decodeError(err)
	}
	s.applyDefaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := "spec"
		if te.Field != "" {
			field += "." + te.Field
		}
		return specErr(field, "must be %s, got %s", kindName(te.Type), te.Value)
	}
	// Errors from the fields' own UnmarshalJSON carry no path; find it.
	return specErr("spec", "%v", err)
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return t.String()
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	}
	return "a mapping"
}

var (
	durationType = reflect.TypeOf(Duration(0))
	commandType  = reflect.TypeOf(Command(nil))
	timeType     = reflect.TypeOf(time.Time{})
)

// checkShape walks a decoded document against t and reports, with its path,
// every key t does not have and every value of the wrong type, so that each
// error names the field at fault.
func checkShape(path string, v any, t reflect.Type) []FieldError {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return nil
	}
	wrong := func(want string) []FieldError {
		return []FieldError{{Field: path, Message: fmt.Sprintf("must be %s, got %s", want, jsonKind(v))}}
	}
	switch t {
	case durationType:
		s, ok := v.(string)
		if !ok {
			return wrong(`a duration such as "90s" or "2h"`)
		}
		if _, err := time.ParseDuration(s); err != nil {
			return []FieldError{{Field: path, Message: fmt.Sprintf(`must be a duration such as "90s" or "2h", got %q`, s)}}
		}
		return nil
	case commandType:
		switch c := v.(type) {
		case string:
			return nil
		case []any:
			for i, a := range c {
				if _, ok := a.(string); !ok {
					return []FieldError{{Field: fmt.Sprintf("%s[%d]", path, i), Message: "must be a string, got " + jsonKind(a)}}
				}
			}
			return nil
		}
		return wrong("a string or a list of strings")
	case timeType:
		s, ok := v.(string)
		if !ok {
			return wrong("an RFC 3339 time such as 2026-12-01T18:00:00Z")
		}
		if _, err := time.Parse(time.RFC3339, s); err != nil {
			return []FieldError{{Field: path, Message: fmt.Sprintf("must be an RFC 3339 time such as 2026-12-01T18:00:00Z, got %q", s)}}
		}
		return nil
	}
	switch t.Kind() {
	case reflect.String:
		if _, ok := v.(string); !ok {
			return wrong("a string")
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return wrong("true or false")
		}
	case reflect.Int, reflect.Int32, reflect.Int64:
		f, ok := v.(float64)
		if !ok || f != float64(int64(f)) {
			return wrong("an integer")
		}
	case reflect.Float32, reflect.Float64:
		if _, ok := v.(float64); !ok {
			return wrong("a number")
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return wrong("a mapping")
		}
		var out []FieldError
		for _, k := range sortedKeys(m) {
			out = append(out, checkShape(path+"."+keyName(k), m[k], t.Elem())...)
		}
		return out
	case reflect.Slice:
		list, ok := v.([]any)
		if !ok {
			return wrong("a list")
		}
		var out []FieldError
		for i, item := range list {
			out = append(out, checkShape(fmt.Sprintf("%s[%d]", path, i), item, t.Elem())...)
		}
		return out
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return wrong("a mapping")
		}
		fields := jsonFieldsOf(t)
		var out []FieldError
		for _, k := range sortedKeys(m) {
			ft, ok := fields.types[k]
			if !ok {
				msg := "unknown field; allowed: " + fields.names
				if k == "true" || k == "false" {
					// YAML 1.1 reads on, off, yes, no, y and n as booleans.
					msg += ` (YAML reads a key "on", "off", "yes" or "no" as ` + k + `)`
				} else if like := Similar(k, fields.list); len(like) > 0 {
					msg += " (did you mean " + strings.Join(like, " or ") + "?)"
				}
				out = append(out, FieldError{Field: path + "." + keyName(k), Message: msg})
				continue
			}
			out = append(out, checkShape(path+"."+keyName(k), m[k], ft)...)
		}
		return out
	}
	return nil
}

// jsonFields are the fields a struct type reads from JSON: each one's type
// by its JSON name, and the names in declaration order.
type jsonFields struct {
	types map[string]reflect.Type
	list  []string // in the struct's order
	names string   // list, joined by ", "
}

// jsonFieldsByType caches jsonFieldsOf: every submission's spec is checked
// against the same few struct types.
var jsonFieldsByType sync.Map // reflect.Type → *jsonFields

func jsonFieldsOf(t reflect.Type) *jsonFields {
	if f, ok := jsonFieldsByType.Load(t); ok {
		return f.(*jsonFields)
	}
	f := &jsonFields{types: map[string]reflect.Type{}}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		f.types[name] = sf.Type
		names = append(names, name)
	}
	f.list, f.names = names, strings.Join(names, ", ")
	jsonFieldsByType.Store(t, f)
	return f
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var (
	projectRe  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	envNameRe  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	residentRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
)

func (s *Spec) applyDefaults() {
	if s.Project == "" {
		s.Project = DefaultProject
	}
	if s.Name == "" && len(s.Command) > 0 {
		s.Name = defaultName(s.Command[len(s.Command)-1])
	}
	if s.Placement.Tier == "" {
		s.Placement.Tier = DefaultTier
	}
	// An empty list or mapping says the same as none; holding nil keeps a
	// parsed spec equal to its recorded form, which omits both.
	if len(s.Env) == 0 {
		s.Env = nil
	}
	if len(s.Labels) == 0 {
		s.Labels = nil
	}
	if len(s.Inputs) == 0 {
		s.Inputs = nil
	}
	s.inputJobsAfter()
	if len(s.Placement.Regions) == 0 {
		s.Placement.Regions = nil
	}
	if len(s.Placement.Providers) == 0 {
		s.Placement.Providers = nil
	}
	if len(s.Checkpoint.Paths) == 0 {
		s.Checkpoint.Paths = nil
	}
	if s.Resources.GPU != nil && len(s.Resources.GPU.Cards) == 0 {
		s.Resources.GPU.Cards = nil
	}
}

// inputJobsAfter names each job an input reads the outputs of (one whose
// id is well formed: Validate refuses the others) in spec.after, unless
// spec.after or spec.after_ended names it already, and names the input by
// the job's id when it has no name.
func (s *Spec) inputJobsAfter() {
	for i := range s.Inputs {
		in := &s.Inputs[i]
		if in.Job == "" || !ValidJobID(in.Job) {
			continue
		}
		if in.Name == "" {
			in.Name = in.Job
		}
		if !slices.Contains(s.After, in.Job) && !slices.Contains(s.AfterEnded, in.Job) {
			s.After = append(s.After, in.Job)
		}
	}
}

// InputJobs returns the inputs that are the outputs of earlier jobs
// (Input.Job), in the spec's order.
func (s *Spec) InputJobs() []Input {
	var out []Input
	for _, in := range s.Inputs {
		if in.Job != "" {
			out = append(out, in)
		}
	}
	return out
}

// inputNameRe is the name of an input from a job: a directory of
// $GPUQ_INPUT_DIR.
var inputNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// defaultName is a name made from the command's last argument: its first 64
// bytes (whole characters), control characters as spaces.
func defaultName(arg string) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(arg, "?") {
		if unicode.IsControl(r) {
			r = ' '
		}
		if b.Len()+utf8.RuneLen(r) > 64 {
			break
		}
		b.WriteRune(r)
	}
	return strings.TrimSpace(b.String())
}

// TextProblem says what is wrong with a name or a one-line text from
// outside (a token's name, a policy version's comment) as a spec's names
// are checked: invalid UTF-8, NUL and control characters such as newlines
// and terminal escapes are refused. It returns "" for a good string.
func TextProblem(s string) string { return badText(s, false) }

// badText says what is wrong with a string PostgreSQL cannot store (NUL,
// invalid UTF-8) or, unless free is set, one carrying control characters
// such as terminal escapes, which have no place in names, labels and keys.
// It returns "" for a good string.
func badText(s string, free bool) string {
	if !utf8.ValidString(s) {
		return "must be valid UTF-8"
	}
	for i, r := range s {
		if r == 0 {
			return fmt.Sprintf("must not contain a NUL character (at byte %d)", i)
		}
		if !free && unicode.IsControl(r) {
			return fmt.Sprintf("must not contain control characters such as newlines or terminal escapes, got %U at byte %d", r, i)
		}
	}
	return ""
}

// Validate checks every field and returns a *SpecError listing all problems.
func (s *Spec) Validate() error {
	var probs []FieldError
	bad := func(field, format string, args ...any) {
		probs = append(probs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	// text checks a name, key or label (free: a command argument or an
	// environment value, where only what PostgreSQL cannot store is
	// refused) and reports whether it was good.
	text := func(field, v string, free bool) bool {
		if msg := badText(v, free); msg != "" {
			bad(field, "%s", msg)
			return false
		}
		return true
	}
	text("spec.name", s.Name, false)
	text("spec.project", s.Project, false)
	for i, a := range s.Command {
		text(fmt.Sprintf("spec.command[%d]", i), a, true)
	}
	for k, v := range s.Env {
		if text("spec.env."+strconv.Quote(k), k, false) {
			text("spec.env."+k, v, true)
		}
	}
	if g := s.Resources.GPU; g != nil {
		for i, c := range g.Cards {
			text(fmt.Sprintf("spec.resources.gpu.cards[%d]", i), c, false)
		}
	}
	text("spec.placement.tier", s.Placement.Tier, false)
	text("spec.placement.residency", s.Placement.Residency, false)
	for i, r := range s.Placement.Regions {
		text(fmt.Sprintf("spec.placement.regions[%d]", i), r, false)
	}
	for i, p := range s.Placement.Providers {
		text(fmt.Sprintf("spec.placement.providers[%d]", i), p, false)
	}
	text("spec.budget.max_price_per_hour", s.Budget.MaxPricePerHour, false)
	text("spec.budget.total", s.Budget.Total, false)
	for i, p := range s.Checkpoint.Paths {
		text(fmt.Sprintf("spec.checkpoint.paths[%d]", i), p, false)
	}
	text("spec.idempotency_key", s.IdempotencyKey, false)
	text("spec.workdir", s.Workdir, false)
	for i, n := range s.Secrets {
		text(fmt.Sprintf("spec.secrets[%d]", i), n, false)
	}
	if s.Notify != nil {
		text("spec.notify.webhook", s.Notify.Webhook, false)
		for i, st := range s.Notify.When {
			text(fmt.Sprintf("spec.notify.when[%d]", i), string(st), false)
		}
	}
	for k, v := range s.Labels {
		if text("spec.labels."+strconv.Quote(k), k, false) {
			text("spec.labels."+k, v, false)
		}
	}
	for i, in := range s.Inputs {
		for _, f := range []struct{ name, v string }{{"name", in.Name}, {"job", in.Job}, {"uri", in.URI}, {"provider", in.Provider}, {"region", in.Region}, {"country", in.Country}} {
			text(fmt.Sprintf("spec.inputs[%d].%s", i, f.name), f.v, false)
		}
	}
	if len(probs) > 0 {
		// The checks below would repeat these strings in their messages.
		sort.SliceStable(probs, func(i, j int) bool { return probs[i].Field < probs[j].Field })
		return &SpecError{Problems: probs}
	}
	if n := utf8.RuneCountInString(s.Name); n > 128 {
		bad("spec.name", "must be at most 128 characters, got %d", n)
	}
	if !projectRe.MatchString(s.Project) {
		bad("spec.project", "must be 1–63 lower-case letters, digits, '-' or '_', starting with a letter or digit, got %q", s.Project)
	}
	if len(s.Command) == 0 {
		bad("spec.command", "must not be empty: give the program and its arguments, e.g. [python, train.py]")
	} else if s.Command[0] == "" {
		bad("spec.command[0]", "must name the program to run")
	} else if strings.HasPrefix(s.Command[0], builtinPrefix) && !s.IsNoop() {
		bad("spec.command", "%q is not a built-in job; the only one is [%s], without arguments", strings.Join(s.Command, " "), NoopCommand)
	}
	for k := range s.Env {
		if !envNameRe.MatchString(k) {
			bad("spec.env."+k, "is not a valid environment variable name")
		} else if strings.HasPrefix(k, "GPUQ_") {
			bad("spec.env."+k, "GPUQ_* variables are set by the worker and cannot be overridden")
		}
	}
	if g := s.Resources.GPU; g != nil {
		if g.Count < 1 || g.Count > 16 {
			bad("spec.resources.gpu.count", "must be 1–16, got %d (leave out resources.gpu for a CPU-only job)", g.Count)
		}
		for i, c := range g.Cards {
			if strings.TrimSpace(c) == "" {
				bad(fmt.Sprintf("spec.resources.gpu.cards[%d]", i), "must name a card such as H100 or A100-80GB")
			} else if err := policy.CheckCard(c); err != nil {
				bad(fmt.Sprintf("spec.resources.gpu.cards[%d]", i), "%v", err)
			}
		}
		if g.MemoryGB < 0 || g.MemoryGB > 1024 {
			bad("spec.resources.gpu.memory_gb", "must be 0–1024, got %d", g.MemoryGB)
		}
	}
	if s.Resources.CPU < 0 || s.Resources.CPU > 512 {
		bad("spec.resources.cpu", "must be 0–512, got %d", s.Resources.CPU)
	}
	if s.Resources.MemoryGB < 0 || s.Resources.MemoryGB > 8192 {
		bad("spec.resources.memory_gb", "must be 0–8192, got %g", s.Resources.MemoryGB)
	}
	switch s.Placement.Tier {
	case "spot", "on-demand", "spot-then-on-demand":
	default:
		bad("spec.placement.tier", "must be spot, on-demand or spot-then-on-demand, got %q", s.Placement.Tier)
	}
	if r := s.Placement.Residency; r != "" && !residentRe.MatchString(r) {
		bad("spec.placement.residency", "must name a residency class such as EU, EEA or CH, got %q", r)
	}
	for i, r := range s.Placement.Regions {
		if r == "" {
			bad(fmt.Sprintf("spec.placement.regions[%d]", i), "must not be empty")
		}
	}
	for i, p := range s.Placement.Providers {
		if p == "" {
			bad(fmt.Sprintf("spec.placement.providers[%d]", i), "must not be empty")
		}
	}
	money := func(field, m, example string) {
		switch _, err := policy.ParseMoney(m); {
		case errors.Is(err, policy.ErrNotMoney):
			bad(field, `must be an amount and a currency such as %q, got %q`, example, m)
		case err != nil:
			bad(field, `must be an amount and a currency such as %q: %v`, example, err)
		}
	}
	if m := s.Budget.MaxPricePerHour; m != "" {
		money("spec.budget.max_price_per_hour", m, "2.50 EUR")
	}
	if m := s.Budget.Total; m != "" {
		money("spec.budget.total", m, "100 EUR")
	}
	if p := s.Retries.MaxErrors; p != nil && (*p < 0 || *p > 100) {
		bad("spec.retries.max_errors", "must be 0–100, got %d", *p)
	}
	if p := s.Retries.MaxPreemptions; p != nil && (*p < 0 || *p > 1000) {
		bad("spec.retries.max_preemptions", "must be 0–1000, got %d", *p)
	}
	if d := time.Duration(s.Retries.Delay); d < 0 || d > 24*time.Hour {
		bad("spec.retries.delay", "must be between 0 and 24h, got %s", d)
	}
	for i, p := range s.Checkpoint.Paths {
		if p == "" || strings.HasPrefix(p, "/") || strings.Contains("/"+p+"/", "/../") {
			bad(fmt.Sprintf("spec.checkpoint.paths[%d]", i), "must be a relative path inside GPUQ_CHECKPOINT_DIR, got %q", p)
		}
	}
	if d := time.Duration(s.Checkpoint.Interval); d < 0 || d > 0 && d < time.Second {
		// The job is handed it in whole seconds: under one it would read 0.
		bad("spec.checkpoint.interval", "must be 0 (none) or at least 1s, got %s", d)
	}
	if n := utf8.RuneCountInString(s.IdempotencyKey); n > 256 {
		bad("spec.idempotency_key", "must be at most 256 characters, got %d", n)
	}
	for k, v := range s.Labels {
		if k == "" || utf8.RuneCountInString(k) > 63 {
			bad("spec.labels", "label names must be 1–63 characters, got %q", k)
		}
		if n := utf8.RuneCountInString(v); n > 256 {
			bad("spec.labels."+k, "must be at most 256 characters, got %d", n)
		}
	}
	if d := time.Duration(s.Timeout); d < 0 || d > 30*24*time.Hour {
		bad("spec.timeout", "must be between 0 (none) and 720h, got %s", d)
	}
	if d := time.Duration(s.ExpectedDuration); d < 0 {
		bad("spec.expected_duration", "must not be negative, got %s", d)
	}
	inputNames := map[string]bool{}
	inputJobs := map[string]bool{}
	for i, in := range s.Inputs {
		field := fmt.Sprintf("spec.inputs[%d]", i)
		if in.Job != "" {
			switch {
			case !ValidJobID(in.Job):
				bad(field+".job", "must be a job id as gpuq prints it (8-4-4-4-12 lower-case hex digits), got %.80q", in.Job)
			case inputJobs[in.Job]:
				bad(field+".job", "%s is named twice: one input reads a job's outputs", in.Job)
			}
			inputJobs[in.Job] = true
			switch {
			case !inputNameRe.MatchString(in.Name):
				bad(field+".name", "must be 1–128 letters, digits, '.', '_' or '-', starting with a letter or digit: "+
					"the job finds the outputs in $GPUQ_INPUT_DIR/<name>; got %.80q", in.Name)
			case inputNames[in.Name]:
				bad(field+".name", "%s names another input too: each input from a job is a directory of its own", in.Name)
			}
			inputNames[in.Name] = true
			for _, f := range []struct{ name, v string }{{"uri", in.URI}, {"provider", in.Provider}, {"region", in.Region}, {"country", in.Country}} {
				if f.v != "" {
					bad(field+"."+f.name, "must be left out with job: gpuq knows where the job's outputs are stored")
				}
			}
			if in.Bytes != 0 {
				bad(field+".bytes", "must be left out with job: gpuq knows how large the job's outputs are")
			}
			if s.IsNoop() {
				bad(field+".job", "the built-in %s job runs no command, so it reads no job's outputs", NoopCommand)
			}
			continue
		}
		if in.Region == "" {
			bad(fmt.Sprintf("spec.inputs[%d].region", i), "must name the region the data lives in")
		}
		if in.Bytes < 0 {
			bad(fmt.Sprintf("spec.inputs[%d].bytes", i), "must not be negative, got %d", in.Bytes)
		}
		if _, err := policy.NormalizeCountry(in.Country); err != nil {
			bad(fmt.Sprintf("spec.inputs[%d].country", i), "%v", err)
		}
	}
	if _, ok := WorkdirDigest(s.Workdir); s.Workdir != "" && !ok {
		bad("spec.workdir", `must name an uploaded directory as "sha256:" and 64 hex digits `+
			`(gpuq submit --workdir DIR and the Python client's workdir= upload one and fill it in), got %.80q`, s.Workdir)
	}
	if s.Workdir != "" && s.IsNoop() {
		bad("spec.workdir", "the built-in %s job runs no command, so it has no working directory", NoopCommand)
	}
	if len(s.Secrets) > maxSpecSecrets {
		bad("spec.secrets", "must name at most %d secrets, got %d", maxSpecSecrets, len(s.Secrets))
	}
	for i, n := range s.Secrets {
		field := fmt.Sprintf("spec.secrets[%d]", i)
		if err := ValidateSecretName(n); err != nil {
			bad(field, "%v", err)
		} else if _, ok := s.Env[n]; ok {
			bad(field, "%s is also in env: a variable comes from one of them", n)
		} else if slices.Index(s.Secrets, n) < i {
			bad(field, "%s is named twice", n)
		} else if s.IsNoop() {
			bad(field, "the built-in %s job runs no command, so it takes no secrets", NoopCommand)
		}
	}
	s.Notify.validate(s, bad)
	if n := len(s.After) + len(s.AfterEnded); n > MaxAfter {
		field, with := "spec.after", ""
		if len(s.AfterEnded) > 0 {
			field, with = "spec.after_ended", " with spec.after"
		}
		bad(field, "must name at most %d jobs%s, got %d", MaxAfter, with, n)
	}
	named := make(map[string]string, len(s.After)+len(s.AfterEnded))
	for _, l := range []struct {
		field string
		ids   []string
	}{{"spec.after", s.After}, {"spec.after_ended", s.AfterEnded}} {
		for i, a := range l.ids {
			field := fmt.Sprintf("%s[%d]", l.field, i)
			switch {
			case !ValidJobID(a):
				bad(field, "must be a job id as gpuq prints it (8-4-4-4-12 lower-case hex digits, such as 0190f3c2-7a1e-7d4b-9c1a-2b3c4d5e6f70), got %.80q", a)
			case named[a] == l.field:
				bad(field, "%s is named twice", a)
			case named[a] != "":
				bad(field, "%s is in %s too: a job runs after another either once it has succeeded or once it has ended", a, named[a])
			default:
				named[a] = l.field
			}
		}
	}
	sort.SliceStable(probs, func(i, j int) bool { return probs[i].Field < probs[j].Field })
	if len(probs) > 0 {
		return &SpecError{Problems: probs}
	}
	return nil
}

// specKeys renames the placement engine's job fields to the job spec's keys.
var specKeys = strings.NewReplacer(
	"job.gpu_count", "spec.resources.gpu.count", "job.min_gpu_memory_gb", "spec.resources.gpu.memory_gb",
	"job.vcpu", "spec.resources.cpu", "job.memory_gb", "spec.resources.memory_gb", "job.tier", "spec.placement.tier",
	"job.providers", "spec.placement.providers", "job.regions", "spec.placement.regions",
	"job.residency", "spec.placement.residency", "job.expected_duration", "spec.expected_duration",
	"job.inputs", "spec.inputs", "job.max_price_per_hour", "spec.budget.max_price_per_hour", "job.budget", "spec.budget.total",
)

// SpecKeys renames the placement engine's field names in err (policy.Requirements's,
// such as job.residency) to the job spec's keys (spec.placement.residency),
// so that an error about a job names what its author wrote.
func SpecKeys(err error) error {
	if err == nil {
		return nil
	}
	return errors.New(specKeys.Replace(err.Error()))
}
