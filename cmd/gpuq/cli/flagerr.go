package cli

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagError names, after an unknown flag, the command's flags it most
// likely meant: "unknown flag: --gpus (did you mean --gpu-count?)"; and
// after a duration without its unit, what one looks like.
func flagError(cmd *cobra.Command, err error) error {
	var invalid *pflag.InvalidValueError
	if errors.As(err, &invalid) && invalid.GetFlag().Value.Type() == "duration" {
		return fmt.Errorf("%w (a duration has a unit: 90s, 30m, 2h45m)", err)
	}
	var unknown *pflag.NotExistError
	if !errors.As(err, &unknown) || unknown.GetSpecifiedName() == "" {
		return err
	}
	if names := similarFlags(cmd, unknown.GetSpecifiedName()); len(names) > 0 {
		return fmt.Errorf("%w (did you mean --%s?)", err, strings.Join(names, " or --"))
	}
	return err
}

// similarFlags lists, at most three, the flags of cmd that name is likely
// another tool's name of, or a misspelling of: first a plural or the first
// word of a flag (--gpus, --gpu for --gpu-count; --cpus for --cpu) or the
// start of one (--mem for --memory-gb), then a typo (at most two letters
// off, one for short names), closest first.
func similarFlags(cmd *cobra.Command, name string) []string {
	type match struct {
		name string
		off  int
	}
	var found []match
	first := func(s string) string {
		w, _, _ := strings.Cut(s, "-")
		return strings.TrimSuffix(w, "s")
	}
	consider := func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" {
			return
		}
		for _, m := range found {
			if m.name == f.Name {
				return
			}
		}
		off := editDistance(name, f.Name)
		typo := 2
		if len(name) < 5 {
			typo = 1
		}
		switch {
		case first(name) == first(f.Name) || len(name) >= 3 && strings.HasPrefix(first(f.Name), name):
			// Another tool's name of the flag ranks before a typo: --gpu
			// is --gpu-count before it is --cpu.
			found = append(found, match{f.Name, 0})
		case off <= typo:
			found = append(found, match{f.Name, off})
		}
	}
	cmd.Flags().VisitAll(consider)
	cmd.InheritedFlags().VisitAll(consider)
	sort.SliceStable(found, func(i, j int) bool { return found[i].off < found[j].off })
	var names []string
	for i := 0; i < len(found) && i < 3; i++ {
		names = append(names, found[i].name)
	}
	return names
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
