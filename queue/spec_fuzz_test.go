package queue

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseSpec checks that ParseSpec refuses or accepts without panicking,
// and that what it accepts is valid, holds nothing PostgreSQL cannot store,
// and reads back to itself once recorded as JSON. Seeds: testdata/fuzz.
func FuzzParseSpec(f *testing.F) {
	f.Add([]byte("command: [python, train.py]\nresources: {gpu: {count: 1}}\n"))
	f.Add([]byte(`{"command": "echo hi", "labels": {"a": "b"}, "budget": {"total": "1 EUR"}}`))
	f.Add([]byte("a: &a [x]\nb: *a\n"))
	f.Add([]byte(`{"name": "a", "name": "b", "command": ["x"], "resources": {"cpu": 1.0}, "env": {"A": "\u00e9"}}`))
	f.Add([]byte(`{"command": ["x"], "labels": {"a": "\ud800"}, "retries": {"max_errors": 1e2}, "timeout": "1h"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := ParseSpec(data)
		// A JSON spec takes the JSON path; the YAML path must read it the
		// same, or the two ways of writing a spec would disagree.
		if slow, slowErr := parseSpecYAML(data); len(data) <= MaxSpecBytes && len(bytes.TrimSpace(data)) > 0 {
			if (err == nil) != (slowErr == nil) || (err != nil && err.Error() != slowErr.Error()) || (err == nil && !reflect.DeepEqual(spec, slow)) {
				t.Fatalf("JSON and YAML paths disagree on %q:\n%+v (%v)\n%+v (%v)", data, spec, err, slow, slowErr)
			}
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "invalid job spec: ") {
				t.Fatalf("error is not a spec error: %v", err)
			}
			return
		}
		if err := spec.Validate(); err != nil {
			t.Fatalf("accepted spec does not validate: %v", err)
		}
		js, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(js, &doc); err != nil {
			t.Fatal(err)
		}
		if carriesNUL(doc) {
			t.Fatalf("accepted spec carries a NUL: %s", js)
		}
		again, err := ParseSpec(js)
		if err != nil {
			t.Fatalf("recorded spec %s does not parse: %v", js, err)
		}
		if !reflect.DeepEqual(spec, again) {
			t.Fatalf("recorded spec reads back differently:\n%+v\n%+v", spec, again)
		}
	})
}

// carriesNUL reports whether a decoded JSON document holds a NUL in any of
// its strings or keys: the text \u0000 (a backslash, then u0000) is not
// one.
func carriesNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, 0)
	case []any:
		for _, e := range v {
			if carriesNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, 0) || carriesNUL(e) {
				return true
			}
		}
	}
	return false
}
