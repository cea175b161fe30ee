package secrets

import "slices"

// automaton is an Aho-Corasick automaton compiled to a DFA over ASCII
// case-folded bytes, so one pass finds every occurrence of every keyword,
// overlapping ones included, without lowercasing the input.
//
// States are numbered so that those with outputs come last: the inner loop
// tests a single integer to know whether a keyword ended at this byte.
type automaton struct {
	class    [256]uint8 // byte -> equivalence class; 0 for bytes in no pattern
	ncls     int
	delta    []int32 // state*ncls + class -> state
	firstOut int32   // states >= firstOut have outputs
	outIdx   []int32 // outputs of state s: outs[outIdx[s-firstOut]:outIdx[s-firstOut+1]]
	outs     []int32 // pattern indexes
	lens     []int   // pattern lengths
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// newAutomaton builds the automaton of patterns (empty patterns are ignored).
func newAutomaton(patterns []string) *automaton {
	a := &automaton{lens: make([]int, len(patterns))}
	// Byte classes: one per distinct folded byte used in a pattern.
	var seen [256]bool
	for i, p := range patterns {
		a.lens[i] = len(p)
		for j := 0; j < len(p); j++ {
			seen[lowerASCII(p[j])] = true
		}
	}
	n := 1
	for c := 0; c < 256; c++ {
		if seen[c] {
			a.class[c] = uint8(n)
			n++
		}
	}
	for c := 'A'; c <= 'Z'; c++ {
		a.class[c] = a.class[c+'a'-'A']
	}
	a.ncls = n

	// Trie.
	type node struct {
		next []int32 // by class; -1 = none
		fail int32
		out  []int32
	}
	newNode := func() node {
		nx := make([]int32, n)
		for i := range nx {
			nx[i] = -1
		}
		return node{next: nx}
	}
	nodes := []node{newNode()}
	for i, p := range patterns {
		if p == "" {
			continue
		}
		s := int32(0)
		for j := 0; j < len(p); j++ {
			c := a.class[p[j]]
			if nodes[s].next[c] < 0 {
				nodes = append(nodes, newNode())
				nodes[s].next[c] = int32(len(nodes) - 1)
			}
			s = nodes[s].next[c]
		}
		nodes[s].out = append(nodes[s].out, int32(i))
	}

	// Failure links by breadth-first search, completing the DFA on the way.
	queue := make([]int32, 0, len(nodes))
	for c := 0; c < n; c++ {
		if t := nodes[0].next[c]; t < 0 {
			nodes[0].next[c] = 0
		} else {
			nodes[t].fail = 0
			queue = append(queue, t)
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		f := nodes[s].fail
		nodes[s].out = append(nodes[s].out, nodes[f].out...)
		for c := 0; c < n; c++ {
			t := nodes[s].next[c]
			if t < 0 {
				nodes[s].next[c] = nodes[f].next[c]
				continue
			}
			nodes[t].fail = nodes[f].next[c]
			queue = append(queue, t)
		}
	}

	// Renumber: states without outputs first (the root stays 0).
	ids := make([]int32, len(nodes))
	var k int32
	for i := range nodes {
		if len(nodes[i].out) == 0 {
			ids[i] = k
			k++
		}
	}
	a.firstOut = k
	a.outIdx = []int32{0}
	for i := range nodes {
		if len(nodes[i].out) > 0 {
			ids[i] = k
			k++
			out := slices.Clone(nodes[i].out)
			slices.Sort(out)
			a.outs = append(a.outs, out...)
			a.outIdx = append(a.outIdx, int32(len(a.outs)))
		}
	}
	a.delta = make([]int32, len(nodes)*n)
	for i := range nodes {
		row := a.delta[int(ids[i])*n:]
		for c := 0; c < n; c++ {
			row[c] = ids[nodes[i].next[c]]
		}
	}
	return a
}

// find advances from state st over s[i:] and returns the index just past the
// first byte that ends a pattern, with the state reached there; ok is false
// when no pattern ends in s[i:].
func (a *automaton) find(s string, i int, st int32) (end int, next int32, ok bool) {
	delta, n, first := a.delta, a.ncls, a.firstOut
	for ; i < len(s); i++ {
		st = delta[int(st)*n+int(a.class[s[i]])]
		if st >= first {
			return i + 1, st, true
		}
	}
	return i, st, false
}

// outputs returns the patterns ending in state st (st >= firstOut).
func (a *automaton) outputs(st int32) []int32 {
	j := st - a.firstOut
	return a.outs[a.outIdx[j]:a.outIdx[j+1]]
}

// contains reports whether any pattern occurs in s.
func (a *automaton) contains(s string) bool {
	_, _, ok := a.find(s, 0, 0)
	return ok
}
