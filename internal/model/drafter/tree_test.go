package drafter

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// Fixtures from the reference's tree_attention_test.py: two batch rows of
// three beams of four tokens.
var refFixtures = []struct {
	beams      [][]int32
	prefixTree [][]int
	packed     []int32
	idx        []int
	unpacker   [][]int32
	positions  []int32
	mask       []string // tree part of the expected (prev_len 3) mask, T = visible
}{
	{
		beams:      [][]int32{{91, 92, 93, 95}, {91, 92, 94, 96}, {91, 92, 93, 97}},
		prefixTree: [][]int{{0, 0, 0, 0}, {0, 0, 1, 1}, {0, 0, 0, 2}},
		packed:     []int32{91, 92, 93, 95, 94, 96, 97},
		idx:        []int{0, 1, 2, 3, 6, 7, 11},
		unpacker:   [][]int32{{0, 1, 2, 3}, {0, 1, 4, 5}, {0, 1, 2, 6}},
		positions:  []int32{0, 1, 2, 3, 2, 3, 3},
		mask: []string{
			"T......",
			"TT.....",
			"TTT....",
			"TTTT...",
			"TT..T..",
			"TT..TT.",
			"TTT...T",
		},
	},
	{
		beams:      [][]int32{{93, 94, 95, 92}, {93, 95, 96, 93}, {93, 94, 97, 96}},
		prefixTree: [][]int{{0, 0, 0, 0}, {0, 1, 1, 1}, {0, 0, 2, 2}},
		packed:     []int32{93, 94, 95, 92, 95, 96, 93, 97, 96},
		idx:        []int{0, 1, 2, 3, 5, 6, 7, 10, 11},
		unpacker:   [][]int32{{0, 1, 2, 3}, {0, 4, 5, 6}, {0, 1, 7, 8}},
		positions:  []int32{0, 1, 2, 3, 1, 2, 3, 2, 3},
		mask: []string{
			"T........",
			"TT.......",
			"TTT......",
			"TTTT.....",
			"T...T....",
			"T...TT...",
			"T...TTT..",
			"TT.....T.",
			"TT.....TT",
		},
	},
}

// The oracles reproduce the reference's own expected values.
func TestReferenceOracles(t *testing.T) {
	for f, c := range refFixtures {
		if got := refDedup(c.beams); !reflect.DeepEqual(got, c.prefixTree) {
			t.Errorf("fixture %d: refDedup = %v, want %v", f, got, c.prefixTree)
		}
		packed, idx, unp := refPack(c.beams)
		if !slices.Equal(packed, c.packed) || !slices.Equal(idx, c.idx) || !reflect.DeepEqual(unp, c.unpacker) {
			t.Errorf("fixture %d: refPack = %v %v %v, want %v %v %v", f, packed, idx, unp, c.packed, c.idx, c.unpacker)
		}
		for p, i := range idx {
			if int32(i%len(c.beams[0])) != c.positions[p] {
				t.Errorf("fixture %d: position of packed %d = %d, want %d", f, p, i%4, c.positions[p])
			}
		}
		if got := maskStrings(refMask(idx, unp)); !slices.Equal(got, c.mask) {
			t.Errorf("fixture %d: refMask =\n%v\nwant\n%v", f, got, c.mask)
		}
	}
	// docs/tree_attention.md: Mars is a red / Mars is reddish when / Mars is dark red.
	const mars, is, a, red, reddish, when, dark = 1, 2, 3, 4, 5, 6, 7
	packed, _, unp := refPack([][]int32{{mars, is, a, red}, {mars, is, reddish, when}, {mars, is, dark, red}})
	if want := []int32{mars, is, a, red, reddish, when, dark, red}; !slices.Equal(packed, want) {
		t.Errorf("refPack(Mars) = %v, want %v", packed, want)
	}
	if want := [][]int32{{0, 1, 2, 3}, {0, 1, 4, 5}, {0, 1, 6, 7}}; !reflect.DeepEqual(unp, want) {
		t.Errorf("refPack(Mars) unpacker = %v, want %v", unp, want)
	}
}

func maskStrings(m [][]bool) []string {
	s := make([]string, len(m))
	for q, row := range m {
		b := make([]byte, len(row))
		for k, v := range row {
			b[k] = '.'
			if v {
				b[k] = 'T'
			}
		}
		s[q] = string(b)
	}
	return s
}

func treeMask(t *Tree) []string {
	m := make([][]bool, t.N())
	for q := range m {
		m[q] = make([]bool, t.N())
		for k := range m[q] {
			m[q][k] = t.Visible(q, k)
		}
	}
	return maskStrings(m)
}

func TestBuildTreeFixtures(t *testing.T) {
	want := []Tree{
		{
			Tokens:   []int32{91, 92, 93, 95, 97, 94, 96},
			Depth:    []int32{0, 1, 2, 3, 3, 2, 3},
			End:      []int32{6, 6, 4, 3, 4, 6, 6},
			Parent:   []int32{-1, 0, 1, 2, 2, 1, 5},
			BeamOf:   []int32{0, 0, 0, 0, 1, 2, 2},
			Unpacker: [][]int32{{0, 1, 2, 3}, {0, 1, 2, 4}, {0, 1, 5, 6}},
			Beams:    [][]int32{{91, 92, 93, 95}, {91, 92, 93, 97}, {91, 92, 94, 96}},
			Order:    []int{0, 2, 1},
		},
		{
			Tokens:   []int32{93, 94, 95, 92, 97, 96, 95, 96, 93},
			Depth:    []int32{0, 1, 2, 3, 2, 3, 1, 2, 3},
			End:      []int32{8, 5, 3, 3, 5, 5, 8, 8, 8},
			Parent:   []int32{-1, 0, 1, 2, 1, 4, 0, 6, 7},
			BeamOf:   []int32{0, 0, 0, 0, 1, 1, 2, 2, 2},
			Unpacker: [][]int32{{0, 1, 2, 3}, {0, 1, 4, 5}, {0, 6, 7, 8}},
			Beams:    [][]int32{{93, 94, 95, 92}, {93, 94, 97, 96}, {93, 95, 96, 93}},
			Order:    []int{0, 2, 1},
		},
	}
	for f, c := range refFixtures {
		tr, err := BuildTree(c.beams)
		if err != nil {
			t.Fatalf("fixture %d: BuildTree: %v", f, err)
		}
		if !reflect.DeepEqual(*tr, want[f]) {
			t.Errorf("fixture %d: BuildTree(%v) =\n%+v\nwant\n%+v", f, c.beams, *tr, want[f])
		}
		checkAgainstReference(t, fmt.Sprintf("fixture %d", f), c.beams, tr)
	}
}

// checkAgainstReference compares tr with the reference's unsorted packing
// through the beams: packed token (i,t) of the reference and node
// Unpacker[sorted(i)][t] of tr must have the same position, and the
// reference mask between any two beam positions must equal tr's interval
// test; and tr must be exactly the reference packing of the sorted beams.
func checkAgainstReference(t *testing.T, name string, beams [][]int32, tr *Tree) {
	t.Helper()
	_, idx, unp := refPack(beams)
	mask := refMask(idx, unp)
	sorted := make([]int, len(beams))
	for i, o := range tr.Order {
		sorted[o] = i
	}
	l := len(beams[0])
	for i := range beams {
		for ti := range l {
			q, rq := int(tr.Unpacker[sorted[i]][ti]), unp[i][ti]
			if tr.Depth[q] != int32(idx[rq]%l) {
				t.Fatalf("%s: depth of (%d,%d) = %d, reference position %d", name, i, ti, tr.Depth[q], idx[rq]%l)
			}
			for j := range beams {
				for tj := range l {
					k, rk := int(tr.Unpacker[sorted[j]][tj]), unp[j][tj]
					if got, want := tr.Visible(q, k), mask[rq][rk]; got != want {
						t.Fatalf("%s: (%d,%d) sees (%d,%d) = %v, reference %v", name, i, ti, j, tj, got, want)
					}
				}
			}
		}
	}
	sortedBeams := make([][]int32, len(beams))
	for i, o := range tr.Order {
		sortedBeams[i] = beams[o]
	}
	packed, _, sunp := refPack(sortedBeams)
	if !slices.Equal(packed, tr.Tokens) || !reflect.DeepEqual(sunp, tr.Unpacker) {
		t.Fatalf("%s: tree %v %v, reference packing of the sorted beams %v %v", name, tr.Tokens, tr.Unpacker, packed, sunp)
	}
}

// randomBeams returns w beams of length l over a vocabulary of v tokens
// after a shared init token; with small v prefixes collide and beams repeat.
func randomBeams(rng *rand.Rand, w, l, v int) [][]int32 {
	init := int32(rng.IntN(v))
	beams := make([][]int32, w)
	for i := range beams {
		beams[i] = make([]int32, l)
		beams[i][0] = init
		for t := 1; t < l; t++ {
			beams[i][t] = int32(rng.IntN(v))
		}
		if i > 0 && rng.IntN(3) == 0 { // copy a prefix of an earlier beam
			j := rng.IntN(i)
			copy(beams[i], beams[j][:rng.IntN(l+1)])
		}
	}
	return beams
}

func TestBuildTreeProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var b TreeBuilder
	trials := 0
	for _, w := range []int{1, 2, 3, 4, 8, 16, 50} {
		for l := 1; l <= 6; l++ {
			for trial := range 40 {
				v := 2 + trial%4
				beams := randomBeams(rng, w, l, v)
				orig := cloneBeams(beams)
				name := fmt.Sprintf("W=%d L=%d trial %d %v", w, l, trial, beams)
				tr, err := b.Build(beams)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !reflect.DeepEqual(beams, orig) {
					t.Fatalf("%s: Build modified its input", name)
				}
				checkTree(t, name, beams, tr)
				if trial%8 == 0 {
					checkAgainstReference(t, name, beams, tr)
				}
				fresh, _ := BuildTree(beams)
				if !reflect.DeepEqual(fresh, tr) {
					t.Fatalf("%s: reused builder gave\n%+v\nfresh BuildTree\n%+v", name, *tr, *fresh)
				}
				trials++
			}
		}
	}
	t.Logf("%d random trees", trials)
}

func cloneBeams(beams [][]int32) [][]int32 {
	c := make([][]int32, len(beams))
	for i := range beams {
		c[i] = slices.Clone(beams[i])
	}
	return c
}

// checkTree checks tr against a brute-force trie of the beams.
func checkTree(t *testing.T, name string, beams [][]int32, tr *Tree) {
	t.Helper()
	w, l := len(beams), len(beams[0])
	// The trie: every distinct non-empty prefix is a node.
	trie := map[string]bool{}
	for _, b := range beams {
		for d := 1; d <= l; d++ {
			trie[fmt.Sprint(b[:d])] = true
		}
	}
	n := tr.N()
	if n != len(trie) {
		t.Fatalf("%s: N = %d, trie has %d nodes", name, n, len(trie))
	}
	if n > 1+w*(l-1) {
		t.Fatalf("%s: N = %d > 1+W(L-1)", name, n)
	}
	if len(tr.Depth) != n || len(tr.End) != n || len(tr.Parent) != n || len(tr.BeamOf) != n {
		t.Fatalf("%s: metadata lengths %d %d %d %d for N = %d", name, len(tr.Depth), len(tr.End), len(tr.Parent), len(tr.BeamOf), n)
	}
	if tr.Width() != w || tr.Length() != l {
		t.Fatalf("%s: W, L = %d, %d", name, tr.Width(), tr.Length())
	}
	// Order is a stable sorting permutation and Beams the sorted beams.
	seen := make([]bool, w)
	for i, o := range tr.Order {
		if seen[o] {
			t.Fatalf("%s: Order %v is not a permutation", name, tr.Order)
		}
		seen[o] = true
		if !slices.Equal(tr.Beams[i], beams[o]) {
			t.Fatalf("%s: Beams[%d] = %v, beams[Order[%d]=%d] = %v", name, i, tr.Beams[i], i, o, beams[o])
		}
		if i > 0 {
			c := slices.Compare(tr.Beams[i-1], tr.Beams[i])
			if c > 0 || c == 0 && tr.Order[i-1] > o {
				t.Fatalf("%s: Beams not stably sorted at %d: Order %v", name, i, tr.Order)
			}
		}
	}
	// Each node's prefix, from the parent chain, is a distinct trie node.
	prefix := make([]string, n)
	prefixes := make([][]int32, n)
	for k := range n {
		p := tr.Parent[k]
		switch {
		case k == 0 && (p != -1 || tr.Depth[0] != 0):
			t.Fatalf("%s: root has parent %d, depth %d", name, p, tr.Depth[0])
		case k > 0 && (p < 0 || int(p) >= k || tr.Depth[k] != tr.Depth[p]+1):
			t.Fatalf("%s: node %d has parent %d (depth %d vs %d)", name, k, p, tr.Depth[k], tr.Depth[max(p, 0)])
		}
		if k > 0 {
			prefixes[k] = slices.Clone(prefixes[p])
		}
		prefixes[k] = append(prefixes[k], tr.Tokens[k])
		prefix[k] = fmt.Sprint(prefixes[k])
		if !trie[prefix[k]] {
			t.Fatalf("%s: node %d is %s, not a prefix of any beam", name, k, prefix[k])
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(prefix)))) != n {
		t.Fatalf("%s: nodes repeat a prefix: %v", name, prefix)
	}
	// Every beam reads back through the unpacker.
	for i, b := range tr.Beams {
		for d, k := range tr.Unpacker[i] {
			if tr.Tokens[k] != b[d] || tr.Depth[k] != int32(d) || prefix[k] != fmt.Sprint(b[:d+1]) {
				t.Fatalf("%s: Unpacker[%d][%d] = %d: token %d depth %d, want %d at %d", name, i, d, k, tr.Tokens[k], tr.Depth[k], b[d], d)
			}
		}
	}
	for k := range n {
		i := tr.BeamOf[k]
		if tr.Unpacker[i][tr.Depth[k]] != int32(k) || i > 0 && tr.Unpacker[i-1][tr.Depth[k]] == int32(k) {
			t.Fatalf("%s: BeamOf[%d] = %d is not the first beam through it", name, k, i)
		}
	}
	// The interval mask is exactly the trie's ancestor-or-self relation.
	for q := range n {
		for k := range n {
			anc := len(prefixes[k]) <= len(prefixes[q]) && slices.Equal(prefixes[k], prefixes[q][:len(prefixes[k])])
			if tr.Visible(q, k) != anc {
				t.Fatalf("%s: Visible(%d, %d) = %v; %s ancestor of %s = %v", name, q, k, !anc, prefix[k], prefix[q], anc)
			}
		}
	}
	// Children come in increasing token order.
	for u := range n {
		var toks []int32
		for c := tr.firstChild(u); c >= 0; c = tr.nextSibling(u, c) {
			if tr.Parent[c] != int32(u) {
				t.Fatalf("%s: child %d of %d has parent %d", name, c, u, tr.Parent[c])
			}
			toks = append(toks, tr.Tokens[c])
		}
		if !slices.IsSorted(toks) || len(slices.Compact(slices.Clone(toks))) != len(toks) {
			t.Fatalf("%s: children of %d have tokens %v", name, u, toks)
		}
	}
}

func TestBuildTreeErrors(t *testing.T) {
	for _, c := range []struct {
		beams [][]int32
		want  string
	}{
		{nil, "drafter: tree of no beams"},
		{[][]int32{{}}, "drafter: beam 0 is empty"},
		{[][]int32{{1, 2}, {1}}, "drafter: beam 1 has length 1, beam 0 has 2"},
		{[][]int32{{1, 2}, {1, 3}, {2, 3}}, "drafter: beam 2 starts with token 2, beam 0 with 1"},
	} {
		if _, err := BuildTree(c.beams); err == nil || err.Error() != c.want {
			t.Errorf("BuildTree(%v) error = %v, want %q", c.beams, err, c.want)
		}
	}
}

func TestTreeHelpers(t *testing.T) {
	tr, _ := BuildTree(refFixtures[0].beams)
	if got, want := tr.Positions(nil, 10), []int32{10, 11, 12, 13, 13, 12, 13}; !slices.Equal(got, want) {
		t.Errorf("Positions(nil, 10) = %v, want %v", got, want)
	}
	if got, want := tr.Path(2, 2), []int32{0, 1, 5}; !slices.Equal(got, want) {
		t.Errorf("Path(2, 2) = %v, want %v", got, want)
	}
	if got, want := tr.PathTo(4), []int32{0, 1, 2, 4}; !slices.Equal(got, want) {
		t.Errorf("PathTo(4) = %v, want %v", got, want)
	}
	// A single beam is a chain: causal attention.
	chain, _ := BuildTree([][]int32{{5, 6, 7}})
	if got, want := treeMask(chain), []string{"T..", "TT.", "TTT"}; !slices.Equal(got, want) {
		t.Errorf("chain mask = %v, want %v", got, want)
	}
	// Identical beams merge completely.
	same, _ := BuildTree([][]int32{{5, 6}, {5, 6}, {5, 6}})
	if same.N() != 2 || !slices.Equal(same.Order, []int{0, 1, 2}) {
		t.Errorf("identical beams: N = %d, Order %v", same.N(), same.Order)
	}
}

func ExampleBuildTree() {
	tr, err := BuildTree([][]int32{
		{91, 92, 93, 95},
		{91, 92, 94, 96},
		{91, 92, 93, 97},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("order   ", tr.Order)
	fmt.Println("tokens  ", tr.Tokens)
	fmt.Println("depth   ", tr.Depth)
	fmt.Println("end     ", tr.End)
	fmt.Println("unpacker", tr.Unpacker)
	// Output:
	// order    [0 2 1]
	// tokens   [91 92 93 95 97 94 96]
	// depth    [0 1 2 3 3 2 3]
	// end      [6 6 4 3 4 6 6]
	// unpacker [[0 1 2 3] [0 1 2 4] [0 1 5 6]]
}

// beamSearchLike returns w beams of length l shaped like beam search output:
// distinct, sharing prefixes, over a realistic vocabulary.
func beamSearchLike(rng *rand.Rand, w, l int) [][]int32 {
	beams := randomBeams(rng, w, l, 32000)
	for i := 1; i < w; i++ {
		j := rng.IntN(i)
		copy(beams[i], beams[j][:1+rng.IntN(l-1)])
	}
	return beams
}

func BenchmarkTreeBuilder(b *testing.B) {
	for _, s := range []struct{ w, l int }{{8, 5}, {50, 6}} {
		rng := rand.New(rand.NewPCG(1, 2))
		sets := make([][][]int32, 64)
		for i := range sets {
			sets[i] = beamSearchLike(rng, s.w, s.l)
		}
		b.Run(fmt.Sprintf("W=%d,L=%d", s.w, s.l), func(b *testing.B) {
			var tb TreeBuilder
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tb.Build(sets[i%len(sets)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
