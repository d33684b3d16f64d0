package cli

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/gpuq/gpuq/queue"
)

// sweepKey is a --sweep key: a label key that can stand in a command as
// {key}.
var sweepKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,62}$`)

// sweepAxis is one --sweep KEY=V1,V2,…: the values {KEY} takes.
type sweepAxis struct {
	key    string
	values []string
}

// parseSweeps reads the --sweep flags, each KEY=V1,V2,…, refusing a
// malformed key, an empty or repeated value, a key given twice, and more
// jobs in all than a batch may hold.
func parseSweeps(flags []string) ([]sweepAxis, error) {
	var axes []sweepAxis
	jobs := 1
	for _, f := range flags {
		key, list, ok := strings.Cut(f, "=")
		switch {
		case !ok || !sweepKey.MatchString(key):
			return nil, fmt.Errorf("--sweep %q: want KEY=V1,V2,… with KEY of letters, digits, '_', '.' or '-', starting with a letter or '_' (it stands in the command as {KEY})", f)
		case slices.ContainsFunc(axes, func(a sweepAxis) bool { return a.key == key }):
			return nil, fmt.Errorf("--sweep %s: given twice; list all its values in one --sweep %s=V1,V2,…", key, key)
		}
		values := strings.Split(list, ",")
		seen := make(map[string]bool, len(values))
		for i, val := range values {
			switch {
			case val == "":
				return nil, fmt.Errorf("--sweep %s: value %d is empty", key, i+1)
			case seen[val]:
				return nil, fmt.Errorf("--sweep %s: %q is given twice", key, val)
			}
			seen[val] = true
		}
		axes = append(axes, sweepAxis{key: key, values: values})
		if jobs *= len(values); jobs > maxBatchFileJobs {
			return nil, fmt.Errorf("--sweep: %d jobs or more, more than the %d a sweep may submit at once", jobs, maxBatchFileJobs)
		}
	}
	return axes, nil
}

// sweepSpecs makes one spec of base per combination of the --sweep values,
// in order (the last --sweep varying fastest): {KEY} in its command, its
// env values and its name replaced by the value, each KEY=value in its
// labels, its name given the values when it names none, and an
// idempotency key the values. Every {KEY} must stand somewhere in the
// command or the env; each spec is checked whole.
func sweepSpecs(base *queue.Spec, axes []sweepAxis, follow bool) ([]*queue.Spec, error) {
	if follow {
		return nil, errors.New("--follow prints one job's output: a sweep takes --wait (then gpuq logs ID, or gpuq results --label)")
	}
	for _, a := range axes {
		mark := "{" + a.key + "}"
		used := slices.ContainsFunc(base.Command, func(arg string) bool { return strings.Contains(arg, mark) })
		for _, val := range base.Env {
			used = used || strings.Contains(val, mark)
		}
		if !used {
			return nil, fmt.Errorf("--sweep %s: neither the command nor an env value holds %s to put its values in (gpuq submit --sweep %s=… -- python train.py --%[1]s %[2]s)", a.key, mark, a.key)
		}
	}
	combos := [][]string{{}}
	for _, a := range axes {
		var next [][]string
		for _, c := range combos {
			for _, val := range a.values {
				next = append(next, append(slices.Clone(c), val))
			}
		}
		combos = next
	}
	specs := make([]*queue.Spec, len(combos))
	for i, values := range combos {
		pairs := make([]string, len(axes))
		oldnew := make([]string, 0, 2*len(axes))
		for k, a := range axes {
			pairs[k] = a.key + "=" + values[k]
			oldnew = append(oldnew, "{"+a.key+"}", values[k])
		}
		put := strings.NewReplacer(oldnew...)
		s := *base
		s.Command = make(queue.Command, len(base.Command))
		for k, arg := range base.Command {
			s.Command[k] = put.Replace(arg)
		}
		if base.Env != nil {
			s.Env = make(map[string]string, len(base.Env))
			for k, val := range base.Env {
				s.Env[k] = put.Replace(val)
			}
		}
		s.Labels = maps.Clone(base.Labels)
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		for k, a := range axes {
			s.Labels[a.key] = values[k]
		}
		if s.Name = put.Replace(base.Name); s.Name == base.Name {
			s.Name = strings.TrimSpace(base.Name + " " + strings.Join(pairs, " "))
		}
		if base.IdempotencyKey != "" {
			s.IdempotencyKey = base.IdempotencyKey + " " + strings.Join(pairs, " ")
		}
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("jobs[%d] (%s): %w; nothing was submitted", i, strings.Join(pairs, " "), err)
		}
		specs[i] = &s
	}
	return specs, nil
}
