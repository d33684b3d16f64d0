package layering

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/gpuq/gpuq"

// room is one row of the package table: the packages under Prefix (less the
// rooms nested in it) may import the module's packages in the rooms named by
// Allowed ("" for all) and in their own room, and third-party packages unless
// StdlibOnly.
type room struct {
	Prefix     string
	Allowed    []string
	StdlibOnly bool
}

// rooms are matched longest prefix first.
var rooms = []room{
	{Prefix: "policy", StdlibOnly: true},
	{Prefix: "adapters", Allowed: []string{"policy"}},
	{Prefix: "queue", Allowed: []string{"policy"}},
	{Prefix: "queue/store", Allowed: []string{"queue", "sql"}},
	{Prefix: "queue/control", Allowed: []string{"queue", "queue/store", "policy", "adapters"}},
	// queuetest starts the real infrastructure tests run against.
	{Prefix: "queue/queuetest", Allowed: []string{"queue", "queue/store", "sql"}},
	{Prefix: "workers", Allowed: []string{"queue", "adapters"}},
	{Prefix: "sql"},
	{Prefix: "cmd", Allowed: []string{""}},
	{Prefix: "internal/layering"},
}

// thirdParty names packages only some rooms may import.
var thirdParty = map[string][]string{
	"github.com/NVIDIA/go-nvml": {"workers/canary"},
	"github.com/lib/pq":         {"queue/store", "sql"},
}

// exceptions are imports against the table that are known and meant to go,
// each with the reason it is still there: package → imported package →
// reason. There are none: workers reach the system of record only through
// the control plane's worker service (workers.ServiceRecords).
var exceptions = map[string]map[string]string{}

// pkg is what `go list -json` says of a package. Only its non-test imports
// are checked: end-to-end tests start the whole system on purpose.
type pkg struct {
	ImportPath string
	Imports    []string
	Standard   bool
}

func TestPackagesImportOnlyWhatTheirRoomAllows(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var violations []string
	dec := json.NewDecoder(bytes.NewReader(out))
	n := 0
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
		violations = append(violations, check(p)...)
	}
	if n < 10 {
		t.Fatalf("go list found only %d packages; is the module root ../..?", n)
	}
	if len(violations) > 0 {
		t.Errorf("imports against the package table (DESIGN.md, Packages):\n  %s", strings.Join(violations, "\n  "))
	}
}

// check returns the imports of p its room does not allow.
func check(p pkg) []string {
	rel, ok := within(p.ImportPath)
	if !ok {
		return nil
	}
	r, ok := roomOf(rel)
	if !ok {
		return []string{fmt.Sprintf("%s: in no room of the table; add it to the layering test", rel)}
	}
	var bad []string
	for _, imp := range p.Imports {
		if reason, ok := exceptions[rel][imp]; ok && reason != "" {
			continue
		}
		if why := forbidden(rel, r, imp); why != "" {
			bad = append(bad, fmt.Sprintf("%s imports %s: %s", rel, imp, why))
		}
	}
	return bad
}

func forbidden(rel string, r room, imp string) string {
	if isStdlib(imp) {
		return ""
	}
	for lib, allowed := range thirdParty {
		if imp == lib || strings.HasPrefix(imp, lib+"/") {
			if !slices.ContainsFunc(allowed, func(a string) bool { return under(rel, a) }) {
				return fmt.Sprintf("only %s may import %s", strings.Join(allowed, ", "), lib)
			}
		}
	}
	target, inModule := within(imp)
	if !inModule {
		if r.StdlibOnly {
			return r.Prefix + " imports the standard library only"
		}
		return ""
	}
	t, _ := roomOf(target)
	if t.Prefix == r.Prefix || slices.Contains(r.Allowed, t.Prefix) || slices.Contains(r.Allowed, "") {
		return ""
	}
	return fmt.Sprintf("%s may import %s only", r.Prefix, describe(r))
}

func describe(r room) string {
	if r.StdlibOnly {
		return "the standard library"
	}
	if len(r.Allowed) == 0 {
		return "its own packages"
	}
	return strings.Join(r.Allowed, ", ")
}

func within(path string) (string, bool) {
	if path == module {
		return "", true
	}
	rel, ok := strings.CutPrefix(path, module+"/")
	return rel, ok
}

func under(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// roomOf is the room with the longest prefix holding path.
func roomOf(path string) (room, bool) {
	best, found := room{}, false
	for _, r := range rooms {
		if under(path, r.Prefix) && (!found || len(r.Prefix) > len(best.Prefix)) {
			best, found = r, true
		}
	}
	return best, found
}

func isStdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func TestTheCheckRefusesAForbiddenImport(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pkg, imp string
		want     bool
	}{
		{"workers", module + "/queue/store", true},
		{"workers", module + "/sql/db", true},
		{"workers", module + "/queue/control", true},
		{"workers", module + "/queue", false},
		{"workers/canary", "github.com/NVIDIA/go-nvml/pkg/nvml", false},
		{"workers", "github.com/NVIDIA/go-nvml/pkg/nvml", true},
		{"policy", "github.com/google/uuid", true},
		{"policy", module + "/queue", true},
		{"policy/spot", "time", false},
		{"queue", module + "/queue/store", true},
		{"queue", module + "/sql/db", true},
		{"queue", module + "/policy", false},
		{"queue/store", module + "/sql/db", false},
		{"queue/store", module + "/queue/control", true},
		{"queue/store", "github.com/lib/pq", false},
		{"queue/control", "github.com/lib/pq", true},
		{"queue/control", module + "/sql/db", true},
		{"queue/control", module + "/queue/store", false},
		{"queue/control", module + "/adapters/local", false},
		{"adapters/local", module + "/queue", true},
		{"cmd/gpuq/cli", module + "/sql/db", false},
	} {
		got := len(check(pkg{ImportPath: module + "/" + c.pkg, Imports: []string{c.imp}})) > 0
		if got != c.want {
			t.Errorf("%s importing %s: refused %v, want %v", c.pkg, c.imp, got, c.want)
		}
	}
}

// TestWorkersLinkNoDatabase checks what the worker packages link, not only
// what they import: nothing under workers/ may reach the PostgreSQL driver,
// the store or the generated queries through any path.
func TestWorkersLinkNoDatabase(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-deps", module+"/workers/...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderr.String())
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, module+"/workers") {
		t.Fatalf("go list -deps did not list the workers package:\n%s", out)
	}
	for _, d := range deps {
		for _, banned := range []string{"github.com/lib/pq", module + "/queue/store", module + "/sql"} {
			if under(d, banned) {
				t.Errorf("the worker links %s", d)
			}
		}
	}
}
