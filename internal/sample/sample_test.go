package sample

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/sample/sampletest"
)

func logf(ps ...float64) []float32 {
	l := make([]float32, len(ps))
	for i, p := range ps {
		l[i] = float32(math.Log(p))
	}
	return l
}

func probsOf(logits []float32, p Params) []float64 {
	d := make([]float64, len(logits))
	Probs(d, logits, p)
	return d
}

func TestProbsHandCases(t *testing.T) {
	inf := float32(math.Inf(-1))
	r2 := math.Sqrt2
	for _, c := range []struct {
		name   string
		logits []float32
		p      Params
		want   []float64
	}{
		{"greedy", []float32{1, 3, 2, 3}, Params{}, []float64{0, 1, 0, 0}},
		{"greedy ignores filters", []float32{1, 3, 2}, Params{TopK: 1, TopP: 0.5}, []float64{0, 1, 0}},
		{"softmax", logf(1, 2, 4), Params{Temperature: 1}, []float64{1. / 7, 2. / 7, 4. / 7}},
		{"temperature 2", logf(1, 2, 4), Params{Temperature: 2}, []float64{1 / (3 + r2), r2 / (3 + r2), 2 / (3 + r2)}},
		{"masked", []float32{0, inf, 0}, Params{Temperature: 1}, []float64{0.5, 0, 0.5}},
		{"top-k 2", []float32{1, 3, 2, 3, 0}, Params{Temperature: 1, TopK: 2}, []float64{0, 0.5, 0, 0.5, 0}},
		{"top-k keeps ties", []float32{0, 2, 2, 1}, Params{Temperature: 1, TopK: 1}, []float64{0, 0.5, 0.5, 0}},
		{"top-k >= V", logf(1, 2, 4), Params{Temperature: 1, TopK: 3}, []float64{1. / 7, 2. / 7, 4. / 7}},
		{"top-p at boundary", logf(0.5, 0.3, 0.2), Params{Temperature: 1, TopP: 0.8}, []float64{0.625, 0.375, 0}},
		{"top-p just above", logf(0.5, 0.3, 0.2), Params{Temperature: 1, TopP: 0.81}, []float64{0.5, 0.3, 0.2}},
		{"top-p one token", logf(0.5, 0.3, 0.2), Params{Temperature: 1, TopP: 0.5}, []float64{1, 0, 0}},
		{"top-p keeps one", logf(0.5, 0.3, 0.2), Params{Temperature: 1, TopP: 0.01}, []float64{1, 0, 0}},
		{"top-p unsorted", logf(0.2, 0.5, 0.3), Params{Temperature: 1, TopP: 0.7}, []float64{0, 0.625, 0.375}},
		{"top-p tie to lower id", logf(0.2, 0.4, 0.2, 0.2), Params{Temperature: 1, TopP: 0.6}, []float64{1. / 3, 2. / 3, 0, 0}},
		{"top-p 1 is off", logf(0.5, 0.3, 0.2), Params{Temperature: 1, TopP: 1}, []float64{0.5, 0.3, 0.2}},
		// Temperature before top-p: at T=2 the top two hold 0.737 < 0.75, so
		// all three stay (top-p before temperature would keep two).
		{"temperature then top-p", logf(0.5, 0.3, 0.2), Params{Temperature: 2, TopP: 0.75},
			[]float64{math.Sqrt(.5) / (math.Sqrt(.5) + math.Sqrt(.3) + math.Sqrt(.2)),
				math.Sqrt(.3) / (math.Sqrt(.5) + math.Sqrt(.3) + math.Sqrt(.2)),
				math.Sqrt(.2) / (math.Sqrt(.5) + math.Sqrt(.3) + math.Sqrt(.2))}},
		// Top-k before top-p: after top-2 the best token holds 4/7 >= 0.5,
		// so it alone stays (top-p first would keep two).
		{"top-k then top-p", logf(0.4, 0.3, 0.2, 0.1), Params{Temperature: 1, TopK: 2, TopP: 0.5}, []float64{1, 0, 0, 0}},
	} {
		got := probsOf(c.logits, c.p)
		for i := range got {
			if math.Abs(got[i]-c.want[i]) > 1e-6 {
				t.Errorf("%s: Probs(%v, %v) = %v, want %v", c.name, c.logits, c.p, got, c.want)
				break
			}
		}
	}
}

// refProbs is a direct transcription of the documented semantics: full sort,
// no candidate prefilter.
func refProbs(logits []float32, p Params) []float64 {
	v := len(logits)
	x := make([]float64, v)
	for i, l := range logits {
		x[i] = float64(l) / float64(p.Temperature)
	}
	if p.TopK > 0 && p.TopK < v {
		s := slices.Clone(x)
		slices.Sort(s)
		kth := s[v-p.TopK]
		for i := range x {
			if x[i] < kth {
				x[i] = math.Inf(-1)
			}
		}
	}
	m := slices.Max(x)
	d := make([]float64, v)
	sum := 0.0
	for i := range x {
		d[i] = math.Exp(x[i] - m)
		sum += d[i]
	}
	for i := range d {
		d[i] /= sum
	}
	if p.TopP > 0 && p.TopP < 1 {
		idx := make([]int, v)
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(d[b], d[a]) })
		cum, keep := 0.0, make([]bool, v)
		for _, i := range idx {
			keep[i] = true
			cum += d[i]
			if cum >= float64(p.TopP)-topPSlack {
				break
			}
		}
		sum = 0
		for i := range d {
			if !keep[i] {
				d[i] = 0
			}
			sum += d[i]
		}
		for i := range d {
			d[i] /= sum
		}
	}
	return d
}

func TestProbsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 2000 {
		v := []int{1, 2, 3, 7, 50, 1000}[trial%6]
		logits := make([]float32, v)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 3)
			if rng.IntN(10) == 0 {
				logits[i] = float32(rng.IntN(3)) // ties
			}
		}
		p := Params{Temperature: float32(0.1 + 2*rng.Float64())}
		if rng.IntN(2) == 0 {
			p.TopK = rng.IntN(v + 2)
		}
		if rng.IntN(2) == 0 {
			p.TopP = float32(rng.Float64())
		}
		got, want := probsOf(logits, p), refProbs(logits, p)
		sum := 0.0
		for i := range got {
			sum += got[i]
			if math.Abs(got[i]-want[i]) > 1e-12 {
				t.Fatalf("Probs(V=%d, %v)[%d] = %g, want %g", v, p, i, got[i], want[i])
			}
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Fatalf("Probs(V=%d, %v) sums to %.17g", v, p, sum)
		}
	}
}

func TestArgmax(t *testing.T) {
	nan := float32(math.NaN())
	for _, c := range []struct {
		logits []float32
		want   int32
	}{
		{[]float32{0}, 0},
		{[]float32{1, 3, 2, 3}, 1},
		{[]float32{-1, -1, -1}, 0},
		{[]float32{nan, 1, 2}, 2},
		{[]float32{nan, nan}, 0},
		{[]float32{float32(math.Inf(-1)), -1e30}, 1},
	} {
		if got := Argmax(c.logits); got != c.want {
			t.Errorf("Argmax(%v) = %d, want %d", c.logits, got, c.want)
		}
	}
}

func TestDrawChiSquare(t *testing.T) {
	for _, probs := range [][]float64{
		{0.3, 0, 0.1, 0.25, 0.05, 0.3},
		{1, 0, 0},
		{0, 0, 3, 1}, // unnormalised
		probsOf(logf(0.4, 0.3, 0.2, 0.05, 0.05), Params{Temperature: 1.3, TopP: 0.9}),
	} {
		rng := rand.New(rand.NewPCG(7, 11))
		const n = 200000
		counts := make([]int, len(probs))
		for range n {
			counts[Draw(probs, rng)]++
		}
		sum := 0.0
		for _, p := range probs {
			sum += p
		}
		norm := make([]float64, len(probs))
		for i, p := range probs {
			norm[i] = p / sum
		}
		stat, df, p := sampletest.ChiSquare(counts, norm, 5)
		if p < 1e-4 {
			t.Errorf("Draw(%v): counts %v: chi2 = %.1f, df %d, p = %.2g", probs, counts, stat, df, p)
		}
	}
}

func TestDrawUsesOneUniform(t *testing.T) {
	a := rand.New(rand.NewPCG(3, 4))
	b := rand.New(rand.NewPCG(3, 4))
	probs := []float64{0.1, 0.2, 0.3, 0.4}
	for range 100 {
		got := Draw(probs, a)
		u := b.Float64()
		want := int32(0)
		for cum := probs[0]; u >= cum; cum += probs[want] {
			want++
		}
		if got != want {
			t.Fatalf("Draw with u=%g = %d, want %d", u, got, want)
		}
	}
}

// Logits without a distribution (a model whose weights hold NaN or Inf
// makes them) are an error, not a panic: they are data, not a programmer's
// mistake.
func TestProbsRefusesNonFinite(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for name, logits := range map[string][]float32{
		"NaN":      {1, nan, 2},
		"+Inf":     {1, 2, inf},
		"all NaN":  {nan, nan},
		"all -Inf": {-inf, -inf},
	} {
		for _, p := range []Params{{Temperature: 1}, {Temperature: 0.5, TopK: 1, TopP: 0.5}} {
			dst := make([]float64, len(logits))
			if err := Probs(dst, logits, p); err == nil {
				t.Errorf("%s %v: no error, dst %v", name, p, dst)
			}
		}
	}
	// Greedy skips NaN as Argmax does.
	dst := make([]float64, 3)
	if err := Probs(dst, []float32{nan, 1, 0}, Params{}); err != nil || dst[1] != 1 {
		t.Errorf("greedy over NaN: %v, %v", dst, err)
	}
}

func TestPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"Probs length": func() { Probs(make([]float64, 2), []float32{1, 2, 3}, Params{Temperature: 1}) },
		"Probs empty":  func() { Probs(nil, nil, Params{}) },
		"Argmax empty": func() { Argmax(nil) },
		"Draw zero":    func() { Draw([]float64{0, 0}, rand.New(rand.NewPCG(1, 1))) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func ExampleProbs() {
	logits := []float32{2, 1, 0.5, -1}
	dst := make([]float64, len(logits))
	Probs(dst, logits, Params{Temperature: 0.7, TopK: 3, TopP: 0.9})
	fmt.Printf("%.3f\n", dst)
	// Output: [0.807 0.193 0.000 0.000]
}

func BenchmarkProbs(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 32000)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 4)
	}
	dst := make([]float64, len(logits))
	for _, p := range []Params{{Temperature: 0.8}, {Temperature: 0.8, TopK: 50}, {Temperature: 0.8, TopP: 0.95}} {
		b.Run(p.String(), func(b *testing.B) {
			for b.Loop() {
				Probs(dst, logits, p)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, p := range []Params{{}, {Temperature: 0.7, TopK: 40, TopP: 0.95}, {Temperature: 1, TopP: 1}, {Temperature: 2, TopP: 0}} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	for _, p := range []Params{{Temperature: -1}, {Temperature: nan}, {Temperature: inf}, {TopK: -1},
		{Temperature: 1, TopP: -0.1}, {Temperature: 1, TopP: 1.01}, {Temperature: 1, TopP: nan}} {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
}
