package queue

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
)

// YAMLError is CheckYAML's refusal: the key path at fault (under the root
// CheckYAML was given), its line, and what is wrong.
type YAMLError struct {
	Field   string
	Line    int
	Message string
}

func (e *YAMLError) Error() string {
	if e.Line == 0 {
		return e.Field + ": " + e.Message
	}
	return fmt.Sprintf("%s (line %d): %s", e.Field, e.Line, e.Message)
}

// CheckYAML refuses YAML (or JSON) that uses anchors or aliases, before any
// decoder expands them: a few kilobytes of nested aliases expand to
// gigabytes ("billion laughs"), and gpuq's files and specs have no use for
// them. It reads every document of data into a syntax tree, which keeps an
// alias as one node, so the check costs no more than the input's size.
// Errors are *YAMLError naming the key path under root and the line:
// `spec.env.A (line 3): YAML alias *x: aliases and anchors are not accepted;
// write the value out`.
func CheckYAML(data []byte, root string) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			// The decoder that reads the document afterwards names the
			// line of a syntax error better (this one's is often a line
			// early); it may run on data without a single alias.
			if !bytes.ContainsRune(data, '*') {
				if _, perr := sigsyaml.YAMLToJSON(data); perr != nil {
					err = perr
				}
			}
			return &YAMLError{Field: fieldOr(root), Message: "not valid YAML or JSON: " + err.Error()}
		}
		if err := checkNode(&doc, root); err != nil {
			return err
		}
	}
}

func fieldOr(path string) string {
	if path == "" {
		return "document"
	}
	return path
}

// checkNode walks n without following aliases; path is the key path to n.
func checkNode(n *yaml.Node, path string) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		what := "alias *" + n.Value
		if n.Kind != yaml.AliasNode {
			what = "anchor &" + n.Anchor
		}
		return &YAMLError{Field: fieldOr(path), Line: n.Line,
			Message: "YAML " + keyName(what) + ": aliases and anchors are not accepted; write the value out"}
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := checkNode(c, path); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := checkNode(c, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			child := keyName(k.Value)
			if path != "" {
				child = path + "." + child
			}
			if err := checkNode(k, child); err != nil {
				return err
			}
			if err := checkNode(v, child); err != nil {
				return err
			}
		}
	}
	return nil
}

// keyName writes a key as it is when it is plain, else quoted, so that an
// error never carries control characters from its input.
func keyName(k string) string {
	if isPlainKey(k) {
		return k
	}
	return strconv.Quote(k)
}

// isPlainKey reports whether k holds only ASCII letters, digits and
// "_&*./: -" (no control character, quote or other byte): every key of
// every submitted spec is named this way, so it is a loop, not a regular
// expression.
func isPlainKey(k string) bool {
	for i := 0; i < len(k); i++ {
		switch c := k[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("_&*./: -", c) >= 0:
		default:
			return false
		}
	}
	return true
}
