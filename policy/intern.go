package policy

// intern gives names (providers, regions, cards) small dense ids in the
// order they are first seen. Placement looks a name up for every offer, and
// offers repeat a few dozen names thousands of times, so the table hashes
// the short name inline and probes linearly instead of going through a Go
// map.
type intern struct {
	names []string
	slots []int32 // id+1 by hash; 0 is empty
}

// id returns name's id and whether it was seen before.
func (t *intern) id(name string) (int32, bool) {
	if len(t.slots) == 0 {
		t.slots = make([]int32, 64)
	}
	mask := uint32(len(t.slots) - 1)
	for i := hashName(name) & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			id := int32(len(t.names))
			t.names = append(t.names, name)
			t.slots[i] = id + 1
			if 2*len(t.names) > len(t.slots) {
				t.grow()
			}
			return id, false
		}
		if t.names[s-1] == name {
			return s - 1, true
		}
	}
}

// lookup returns name's id without adding it.
func (t *intern) lookup(name string) (int32, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	mask := uint32(len(t.slots) - 1)
	for i := hashName(name) & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return 0, false
		}
		if t.names[s-1] == name {
			return s - 1, true
		}
	}
}

// grow doubles the table, keeping it at most half full.
func (t *intern) grow() {
	t.slots = make([]int32, 2*len(t.slots))
	mask := uint32(len(t.slots) - 1)
	for id, name := range t.names {
		i := hashName(name) & mask
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = int32(id) + 1
	}
}

// hashName is 32-bit FNV-1a.
func hashName(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}
