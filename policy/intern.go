package policy

import "math/rand/v2"

// intern gives keys (provider, region and card names) small dense
// ids in the order they are first seen. Preparing offers looks keys up for
// every offer, and offers repeat a few dozen keys thousands of times, so
// the table probes linearly in one slice instead of going through a Go
// map. Callers hash the key: hashName for names, whose seed differs
// between processes; ids do not depend on it.
type intern[K comparable] struct {
	names  []K
	hashes []uint32 // by id
	slots  []int32  // id+1 by hash; 0 is empty
}

// id returns the id of name, whose hash is h, and whether it was seen
// before.
func (t *intern[K]) id(name K, h uint32) (int32, bool) {
	if len(t.slots) == 0 {
		t.slots = make([]int32, 64)
	}
	mask := uint32(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			id := int32(len(t.names))
			t.names, t.hashes = append(t.names, name), append(t.hashes, h)
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

// lookup returns the id of name, whose hash is h, without adding it.
func (t *intern[K]) lookup(name K, h uint32) (int32, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	mask := uint32(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
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
func (t *intern[K]) grow() {
	t.slots = make([]int32, 2*len(t.slots))
	mask := uint32(len(t.slots) - 1)
	for id, h := range t.hashes {
		i := h & mask
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = int32(id) + 1
	}
}

// nameSeed is random per process, so that names chosen to collide in one
// process do not collide in the next.
var nameSeed = rand.Uint64() | 1

// hashName hashes a short name. Names are a few bytes long and a set
// hashes three of them per offer, so it reads them a word at a time inline
// (as wyhash does) rather than calling into hash/maphash: the words it
// reads cover every byte, and the length is mixed in.
func hashName(t string) uint32 {
	h := nameSeed ^ uint64(len(t))*0x9e3779b97f4a7c15
	var w uint64
	switch n := len(t); {
	case n >= 8:
		for s := t; len(s) > 8; s = s[8:] {
			h = (h ^ le64(s)) * 0xbf58476d1ce4e5b9
			h ^= h >> 31
		}
		w = le64(t[n-8:])
	case n >= 4:
		w = le32(t) | le32(t[n-4:])<<32
	case n > 0:
		w = uint64(t[0]) | uint64(t[n>>1])<<8 | uint64(t[n-1])<<16
	}
	h = (h ^ w) * 0x94d049bb133111eb
	return uint32((h ^ h>>29) >> 32)
}

// le64 and le32 read the first eight and four bytes of s, little-endian.
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func le32(s string) uint64 {
	_ = s[3]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}

// cardKey is an offer's card name, by its id among the set's card names,
// and, when the name does not say it, the card's memory (-1 when it
// does): "A100" with 40 GB and "A100" with 80 GB match different
// requirements, "A100-80GB" matches the same ones whatever memory the
// offer states.
type cardKey struct {
	name  int32
	memGB int64
}

func (k cardKey) hash() uint32 {
	return uint32((uint64(k.memGB)*0x9e3779b97f4a7c15 ^ uint64(k.name)) * 0xbf58476d1ce4e5b9 >> 32)
}
