package policy

import "hash/maphash"

// intern gives names (providers, regions, cards) small dense ids in the
// order they are first seen. Preparing offers looks names up for every
// offer, and offers repeat a few dozen names thousands of times, so the
// table probes linearly in one slice instead of going through a Go map.
// The hash seed differs between processes; ids do not depend on it.
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

var nameSeed = maphash.MakeSeed()

func hashName(s string) uint32 { return uint32(maphash.String(nameSeed, s)) }
