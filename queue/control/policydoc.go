package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	"sigs.k8s.io/yaml"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
)

// MaxPolicyBytes bounds a policy document set through the API or gpuq
// policy set: far more than any organisation's rules need.
const MaxPolicyBytes = 4 << 20

// DecodeHook lets documents write money as "2.50 EUR" and durations as
// "6h", as config and policy files do.
func DecodeHook() mapstructure.DecodeHookFunc {
	return mapstructure.ComposeDecodeHookFunc(
		mapstructure.TextUnmarshallerHookFunc(),
		mapstructure.StringToTimeDurationHookFunc(),
	)
}

// ParseRules reads a policy document, YAML or JSON (format is a viper
// config type: "yaml", "json"…), strictly: an unknown key is an error
// naming its path and the keys allowed there, aliases are refused before
// anything expands them, and the rules must pass policy.Rules.Validate.
// It is how a policy file, the HTTP API and the stored versions are read.
func ParseRules(data []byte, format string) (policy.Rules, error) {
	var rules policy.Rules
	f, err := ReadDocument(data, format)
	if err != nil {
		return rules, err
	}
	if err := f.Unmarshal(&rules, func(c *mapstructure.DecoderConfig) {
		c.DecodeHook = DecodeHook()
		c.ErrorUnused = true
	}); err != nil {
		return rules, UnknownKeys(err, reflect.TypeOf(rules))
	}
	if err := rules.Validate(); err != nil {
		return rules, err
	}
	return rules, nil
}

// ReadDocument checks a YAML or JSON document (a policy or offers file),
// aliases refused before anything expands them, and reads it into a viper
// of its own (format is a viper config type: "yaml", "json"…). The syntax
// is checked with the job spec's parser, whose errors give the line where
// the problem is (the config reader's are a line early).
func ReadDocument(data []byte, format string) (*viper.Viper, error) {
	if err := queue.CheckYAML(data, ""); err != nil {
		return nil, err
	}
	if _, err := yaml.YAMLToJSON(data); err != nil {
		return nil, fmt.Errorf("not valid YAML or JSON: %w", err)
	}
	f := viper.New()
	f.SetConfigType(format)
	if err := f.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("reading: %w", err)
	}
	return f, nil
}

// RulesDocument writes rules as a policy document in JSON, the shape
// ParseRules reads: the keys of the policy file, money as "2.50 EUR",
// durations as "6h0m0s", unset fields left out.
func RulesDocument(rules policy.Rules) (json.RawMessage, error) {
	doc := documentOf(reflect.ValueOf(rules))
	if doc == nil {
		doc = map[string]any{}
	}
	return json.Marshal(doc)
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	moneyType    = reflect.TypeFor[policy.Money]()
)

// documentOf is v as JSON values keyed by mapstructure tags, nil when v is
// its zero value.
func documentOf(v reflect.Value) any {
	if v.IsZero() {
		return nil
	}
	switch {
	case v.Type() == durationType:
		return time.Duration(v.Int()).String()
	case v.Type() == moneyType:
		return v.Interface().(policy.Money).String()
	}
	switch v.Kind() {
	case reflect.Struct:
		out := map[string]any{}
		for i := range v.NumField() {
			key := v.Type().Field(i).Tag.Get("mapstructure")
			if key == "" || key == "-" {
				continue
			}
			if f := documentOf(v.Field(i)); f != nil {
				out[key] = f
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case reflect.Slice:
		out := make([]any, v.Len())
		for i := range v.Len() {
			out[i] = documentOf(v.Index(i))
			if out[i] == nil {
				out[i] = reflect.Zero(v.Type().Elem()).Interface()
			}
		}
		return out
	case reflect.Map:
		out := map[string]any{}
		for _, k := range v.MapKeys() {
			e := documentOf(v.MapIndex(k))
			if e == nil {
				e = v.MapIndex(k).Interface()
			}
			out[k.String()] = e
		}
		return out
	}
	return v.Interface()
}

// invalidKeys matches mapstructure's report of unknown keys: "'rules[0]' has
// invalid keys: foo, bar", with ” for the top level.
var invalidKeys = regexp.MustCompile(`'([^']*)' has invalid keys: (.+)`)

// UnknownKeys rewrites mapstructure's unknown-key errors in err to name
// each key by its full path and list the keys allowed there, found in t,
// and those it was likely meant to be: `exchange_rate: unknown key;
// allowed: base_currency, exchange_rates, … (did you mean exchange_rates?)`.
// Other errors are returned as they are.
func UnknownKeys(err error, t reflect.Type) error {
	matches := invalidKeys.FindAllStringSubmatch(err.Error(), -1)
	if matches == nil {
		return err
	}
	var msgs []string
	for _, m := range matches {
		keys := keysAt(t, m[1])
		allowed := strings.Join(keys, ", ")
		for _, key := range strings.Split(m[2], ", ") {
			full := key
			if m[1] != "" {
				full = m[1] + "." + key
			}
			msg := full + ": unknown key"
			if allowed != "" {
				msg += "; allowed: " + allowed
			}
			if like := queue.Similar(key, keys); len(like) > 0 {
				msg += " (did you mean " + strings.Join(like, " or ") + "?)"
			}
			msgs = append(msgs, msg)
		}
	}
	slices.Sort(msgs)
	return errors.New(strings.Join(msgs, "; "))
}

// keysAt lists the mapstructure keys of the struct at path ("rules[0]",
// "spot") inside t, or nil when path leads elsewhere.
func keysAt(t reflect.Type, path string) []string {
	for _, part := range strings.FieldsFunc(path, func(r rune) bool { return r == '.' }) {
		name, _, indexed := strings.Cut(part, "[")
		t = structOf(t)
		if t == nil {
			return nil
		}
		f, ok := fieldByKey(t, name)
		if !ok {
			return nil
		}
		t = f.Type
		if indexed {
			for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
				t = t.Elem()
			}
		}
	}
	if t = structOf(t); t == nil {
		return nil
	}
	var keys []string
	for i := range t.NumField() {
		if k := t.Field(i).Tag.Get("mapstructure"); k != "" && k != "-" {
			keys = append(keys, k)
		}
	}
	return keys
}

func structOf(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	return t
}

func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("mapstructure") == key {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

// yamlJSON is a YAML or JSON document as JSON; an empty one is {}.
func yamlJSON(data []byte) (json.RawMessage, error) {
	b, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML or JSON: %w", err)
	}
	if t := bytes.TrimSpace(b); len(t) == 0 || string(t) == "null" {
		return json.RawMessage("{}"), nil
	}
	if b[0] != '{' {
		return nil, errors.New("the policy must be a mapping of keys such as rules and budgets")
	}
	return b, nil
}
