package policy

import (
	"math"
	"math/rand/v2"
)

// intern gives keys small dense ids in the order they are first seen.
// Preparing offers looks keys up for every offer, and offers repeat a few
// dozen keys thousands of times, so the table probes linearly in one slice
// instead of going through a Go map. Callers hash the key; ids do not
// depend on the hash. Names have their own table, nameTable.
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

// hashName hashes a short name, and returns the last word it read. Names
// are a few bytes long and a set hashes three of them per offer, so it
// reads them a word at a time inline (as wyhash does) rather than calling
// into hash/maphash: the words it reads cover every byte, and the length
// is mixed in. A name of at most eight bytes is all in its last word, so
// two such names of the same length are equal exactly when their words
// are.
func hashName(t string) (uint32, uint64) {
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
	return uint32((h ^ h>>29) >> 32), w
}

// nameTable is an intern of names (providers, regions, cards). Most names
// are at most eight bytes long, and it compares those as their length and
// the last word hashName read, without calling into the runtime to compare
// bytes.
type nameTable struct {
	names []string
	keys  []nameKey // by id
	slots []int32   // id+1 by hash; 0 is empty
}

// nameKey is what nameTable compares before a name's bytes.
type nameKey struct {
	word uint64 // the name's last word
	hash uint32
	len  uint32 // of the name, or MaxUint32 when it does not fit
}

func keyOf(name string) nameKey {
	h, w := hashName(name)
	return nameKey{word: w, hash: h, len: uint32(min(len(name), math.MaxUint32))}
}

// find returns the slot of name, whose key is k: the one that holds it,
// or else the empty one where it would go.
func (t *nameTable) find(name string, k nameKey) *int32 {
	mask := uint32(len(t.slots) - 1)
	for i := k.hash & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if *s == 0 || t.keys[*s-1] == k && (len(name) <= 8 || t.names[*s-1] == name) {
			return s
		}
	}
}

// id returns the id of name and whether it was seen before.
func (t *nameTable) id(name string) (int32, bool) {
	k := keyOf(name)
	if len(t.slots) > 0 {
		if s := t.find(name, k); *s != 0 {
			return *s - 1, true
		}
	}
	return t.add(name, k), false
}

// add gives name, whose key is k, the next id.
func (t *nameTable) add(name string, k nameKey) int32 {
	if len(t.slots) == 0 {
		t.slots = make([]int32, 64)
	}
	id := int32(len(t.names))
	t.names, t.keys = append(t.names, name), append(t.keys, k)
	*t.find(name, k) = id + 1
	if 2*len(t.names) > len(t.slots) {
		t.grow()
	}
	return id
}

// lookup returns the id of name without adding it.
func (t *nameTable) lookup(name string) (int32, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	s := t.find(name, keyOf(name))
	return *s - 1, *s != 0
}

// grow doubles the table, keeping it at most half full.
func (t *nameTable) grow() {
	t.slots = make([]int32, 2*len(t.slots))
	mask := uint32(len(t.slots) - 1)
	for id, k := range t.keys {
		i := k.hash & mask
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = int32(id) + 1
	}
}

// constWords finds a string among a few constant words, no two of one
// length and each 4 to 12 bytes long, without branching on which one it
// is: it compares the string with the word of its length as three
// overlapping 4-byte reads, which cover every byte.
type constWords [13]struct {
	reads [3]uint32 // of the word of this length, at 0, (n-4)/2 and n-4
	index int8      // of the word of this length, or -1 where none
}

func newConstWords(words ...string) *constWords {
	c := &constWords{}
	for n := range c {
		c[n].index = -1
	}
	for i, w := range words {
		n := len(w)
		if n < 4 || n >= len(c) || c[n].index >= 0 {
			panic("policy: constWords needs words of distinct lengths from 4 to 12 bytes")
		}
		c[n].reads = [3]uint32{uint32(le32(w)), uint32(le32(w[(n-4)/2:])), uint32(le32(w[n-4:]))}
		c[n].index = int8(i)
	}
	return c
}

// find returns the index of s among the words, or -1.
func (c *constWords) find(s string) int {
	n := len(s)
	if n < 4 || n >= len(c) {
		return -1
	}
	w := &c[n]
	diff := (uint32(le32(s)) ^ w.reads[0]) | (uint32(le32(s[(n-4)/2:])) ^ w.reads[1]) | (uint32(le32(s[n-4:])) ^ w.reads[2])
	i := int(w.index)
	if diff != 0 {
		i = -1
	}
	return i
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
