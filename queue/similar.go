package queue

import (
	"sort"
	"strings"
)

// Similar lists, at most three, the names among candidates that name is
// likely another tool's word for, or a misspelling of: first those whose
// first word is name's, a plural aside, or starts with name (gpus and gpu
// for gpu-count, cpus for cpu, retry for retries, mem for memory_gb), then
// a typo of one (at most two letters off, one for a name under five
// letters), closest first. Words are separated by - or _. It makes the
// "did you mean" hints of unknown flags and spec fields.
func Similar(name string, candidates []string) []string {
	type match struct {
		name string
		off  int
	}
	var found []match
	first := func(s string) string {
		w, _, _ := strings.Cut(strings.ReplaceAll(s, "_", "-"), "-")
		if strings.HasSuffix(w, "ies") {
			return strings.TrimSuffix(w, "ies") + "y"
		}
		return strings.TrimSuffix(w, "s")
	}
	typo := 2
	if len(name) < 5 {
		typo = 1
	}
	word := first(name)
	for _, c := range candidates {
		switch {
		case c == name:
		case word != "" && word == first(c) || len(name) >= 3 && strings.HasPrefix(first(c), name):
			// Another tool's word for it ranks before a typo: gpu is
			// gpu-count before it is cpu.
			found = append(found, match{c, 0})
		case abs(len(name)-len(c)) <= typo:
			// Only then can it be a typo: the distance is at least the
			// difference in length. A long name from outside (a spec's
			// key) costs no more than a short one.
			if off := editDistance(name, c); off <= typo {
				found = append(found, match{c, off})
			}
		}
	}
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

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
