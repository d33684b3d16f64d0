package queue

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// aliasBomb is a "billion laughs" spec: n levels, each a list of ten
// aliases of the level below, so that it expands to 10^n strings.
func aliasBomb(n int) string {
	var b strings.Builder
	b.WriteString("command: [echo]\nlabels:\n  a0: &a0 \"lol\"\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "  a%d: &a%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

func TestParseSpecRefusesYAMLAliasesBeforeExpandingThem(t *testing.T) {
	t.Parallel()
	// 10^9 strings once expanded: decoding it would take gigabytes.
	_, err := ParseSpec([]byte(aliasBomb(9)))
	var se *SpecError
	if !errors.As(err, &se) {
		t.Fatalf("want a SpecError, got %v", err)
	}
	p := se.Problems[0]
	if p.Field != "spec.labels.a0" || !strings.Contains(p.Message, "line 3: YAML anchor &a0: aliases and anchors are not accepted") {
		t.Fatalf("want the anchor at spec.labels.a0 on line 3, got %v", err)
	}
}

func TestParseSpecRefusesAMergeKeyAlias(t *testing.T) {
	t.Parallel()
	_, err := ParseSpec([]byte("base: &base {A: x}\ncommand: [echo]\nenv:\n  <<: *base\n"))
	if err == nil || !strings.Contains(err.Error(), "spec.base: line 1: YAML anchor &base") {
		t.Fatalf("want the anchor named at spec.base line 1, got %v", err)
	}
}

func TestParseSpecRefusesWhatPostgreSQLCannotStoreAndTerminalEscapes(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, spec, field, msg string }{
		{"NUL in name (JSON)", `{"command": ["echo"], "name": "a\u0000b"}`, "spec.name", "must not contain a NUL character (at byte 1)"},
		{"NUL in name (YAML)", "command: [echo]\nname: \"a\\0b\"\n", "spec.name", "NUL"},
		{"NUL in a command argument", `{"command": ["echo", "x\u0000"]}`, "spec.command[1]", "NUL"},
		{"NUL in an env value", `{"command": ["echo"], "env": {"A": "\u0000"}}`, "spec.env.A", "NUL"},
		{"NUL in an env key", `{"command": ["echo"], "env": {"A\u0000": "x"}}`, `spec.env."A\x00"`, "NUL"},
		{"NUL in a label key", `{"command": ["echo"], "labels": {"k\u0000": "v"}}`, `spec.labels."k\x00"`, "NUL"},
		{"escape in a label value", `{"command": ["echo"], "labels": {"team": "\u001b]0;owned\u0007"}}`, "spec.labels.team", "control characters"},
		{"escape in the name", "command: [echo]\nname: \"\\e[2J\"\n", "spec.name", "U+001B"},
		{"newline in a label", "command: [echo]\nlabels: {team: \"a\\nb\"}\n", "spec.labels.team", "control characters"},
		{"C1 control in a region", `{"command": ["echo"], "placement": {"regions": ["eu\u009b"]}}`, "spec.placement.regions[0]", "U+009B"},
		{"NUL in the idempotency key", `{"command": ["echo"], "idempotency_key": "\u0000"}`, "spec.idempotency_key", "NUL"},
		{"escape in an input uri", `{"command": ["echo"], "inputs": [{"region": "r", "bytes": 1, "uri": "s3://\u001b"}]}`, "spec.inputs[0].uri", "control"},
		{"escape in a checkpoint path", `{"command": ["echo"], "checkpoint": {"paths": ["a\u001bb"]}}`, "spec.checkpoint.paths[0]", "control"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseSpec([]byte(c.spec))
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("want a SpecError, got %v", err)
			}
			for _, p := range se.Problems {
				if p.Field == c.field && strings.Contains(p.Message, c.msg) {
					if strings.ContainsAny(err.Error(), "\x00\x1b\x07\u009b") {
						t.Fatalf("the error carries the control characters it refuses: %q", err)
					}
					return
				}
			}
			t.Fatalf("want a problem at %s containing %q, got %q", c.field, c.msg, err)
		})
	}
}

func TestParseSpecKeepsShellScriptsWithNewlinesAndNamesThemOnOneLine(t *testing.T) {
	t.Parallel()
	s, err := ParseSpec([]byte("command: |\n  echo start\n  python train.py\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Command[2] != "echo start\npython train.py\n" {
		t.Fatalf("command = %q", s.Command)
	}
	if s.Name != "echo start python train.py" {
		t.Fatalf("name = %q, want the script on one line", s.Name)
	}
}

func TestDefaultNameCutsAtAWholeCharacter(t *testing.T) {
	t.Parallel()
	s, err := ParseSpec([]byte(`{"command": ["` + strings.Repeat("x", 63) + `é"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != strings.Repeat("x", 63) {
		t.Fatalf("name = %q", s.Name)
	}
}
