package train

// The oracle: the reference trainer's forward and loss (train/model.py and
// train/loss.py, shared/reference/redrafter-algorithm.md §8.2–8.3) written
// with plain loops in float64, differentiated by central finite differences.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
)

// refParams is Params in float64, by name.
type refParams map[string][]float64

func toRef(p *Params) refParams {
	r := refParams{}
	for _, t := range p.List {
		v := make([]float64, len(t.Data))
		for i, x := range t.Data {
			v[i] = float64(x)
		}
		r[t.Name] = v
	}
	return r
}

// linear returns W·x (+ b), W [out, len(x)] row-major.
func linear(w []float64, x []float64, b []float64) []float64 {
	out := len(w) / len(x)
	y := make([]float64, out)
	for o := range out {
		s := 0.0
		for j, v := range x {
			s += w[o*len(x)+j] * v
		}
		if b != nil {
			s += b[o]
		}
		y[o] = s
	}
	return y
}

func silu64(x float64) float64 { return x / (1 + math.Exp(-x)) }

// refLoss is the loss of batch b under parameters p: Σ_i mean over labelled
// rows of CE + klWeight·KL.
func refLoss(c drafter.Config, p refParams, emb []float64, b *batch, klWeight float64) float64 {
	H, V, T, R := c.HiddenSize, c.VocabSize, b.T, b.R
	e := func(tok int32) []float64 { return emb[int(tok)*H : (int(tok)+1)*H] }
	ce, kl := make([]float64, T), make([]float64, T)
	cnt := make([]int, T)
	for r := range R {
		h := make([]float64, H)
		for j := range H {
			h[j] = float64(b.ctx[r*H+j])
		}
		s := make([]float64, H) // s_0 = 0
		for i := range T {
			x := e(b.in[i*R+r])
			if c.RNN {
				a := linear(p["rnn_w.weight"], x, nil)
				u := linear(p["rnn_u.weight"], s, p["rnn_u.bias"])
				for j := range a {
					s[j] = silu64(a[j] + u[j])
				}
			} else {
				for j := range s {
					s[j] += x[j]
				}
			}
			z := append(append([]float64(nil), h...), s...) // cat([h, s])
			if w, ok := p["input_proj.weight"]; ok {
				z = linear(w, z, p["input_proj.bias"])
			}
			for k := range c.NumDraftLayers {
				y := linear(p[fmt.Sprintf("lm_head.%d.linear.weight", k)], z, p[fmt.Sprintf("lm_head.%d.linear.bias", k)])
				for j := range z {
					z[j] += silu64(y[j])
				}
			}
			logits := linear(p[fmt.Sprintf("lm_head.%d.weight", c.NumDraftLayers)], z, nil)
			l := b.label[i*R+r]
			if l < 0 {
				continue
			}
			mx := math.Inf(-1)
			for _, v := range logits {
				mx = math.Max(mx, v)
			}
			sum := 0.0
			for _, v := range logits {
				sum += math.Exp(v - mx)
			}
			lse := mx + math.Log(sum)
			ce[i] += lse - logits[l]
			if b.soft != nil {
				for j := range V {
					if q := float64(b.soft[(i*R+r)*V+j]); q > 0 {
						kl[i] += q * (math.Log(q) - (logits[j] - lse))
					}
				}
			}
			cnt[i]++
		}
	}
	loss := 0.0
	for i := range T {
		if cnt[i] > 0 {
			loss += (ce[i] + klWeight*kl[i]) / float64(cnt[i])
		}
	}
	return loss
}

// randomBatch makes a batch with some unlabelled rows (as at a sequence's
// end or inside its prompt) and, with soft, random teacher distributions.
func randomBatch(rng *rand.Rand, c drafter.Config, R, T int, soft bool) *batch {
	H, V := c.HiddenSize, c.VocabSize
	b := &batch{R: R, T: T, ctx: make([]float32, R*H), in: make([]int32, T*R), label: make([]int32, T*R)}
	for i := range b.ctx {
		b.ctx[i] = float32(rng.NormFloat64())
	}
	for n := range b.in {
		b.in[n] = int32(rng.IntN(V))
		b.label[n] = int32(rng.IntN(V))
		if rng.IntN(5) == 0 {
			b.label[n] = -1
		}
	}
	if soft {
		b.soft = make([]float32, T*R*V)
		for n := range T * R {
			sum := 0.0
			row := b.soft[n*V : (n+1)*V]
			for j := range row {
				x := math.Exp(2 * rng.NormFloat64())
				if j == 0 {
					x = 0 // a zero probability must not produce NaN
				}
				row[j] = float32(x)
				sum += x
			}
			for j := range row {
				row[j] = float32(float64(row[j]) / sum)
			}
		}
	}
	return b
}

func TestGradientFiniteDifferences(t *testing.T) {
	cases := []struct {
		name    string
		c       drafter.Config
		R, T    int
		kl      float32
		threads int
	}{
		{"rnn-2-layers", drafter.Config{VocabSize: 11, HiddenSize: 4, NumDraftLayers: 2, RNN: true}, 3, 5, 0, 1},
		{"rnn-kl", drafter.Config{VocabSize: 13, HiddenSize: 3, NumDraftLayers: 1, RNN: true}, 4, 3, 0.7, 2},
		{"input-proj", drafter.Config{VocabSize: 7, HiddenSize: 3, ExitDim: 5, NumDraftLayers: 2, RNN: true}, 2, 4, 0.3, 1},
		{"no-blocks", drafter.Config{VocabSize: 9, HiddenSize: 2, NumDraftLayers: 0, RNN: true}, 5, 2, 0, 3},
		{"cumsum", drafter.Config{VocabSize: 10, HiddenSize: 3, NumDraftLayers: 1, RNN: false}, 3, 3, 0.5, 1},
		{"one-step", drafter.Config{VocabSize: 8, HiddenSize: 3, NumDraftLayers: 1, RNN: true}, 3, 1, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
			p, err := FromHead(drafter.NewRandom(tc.c, 3))
			if err != nil {
				t.Fatal(err)
			}
			c := p.Config
			emb := make([]float32, c.VocabSize*c.HiddenSize)
			emb64 := make([]float64, len(emb))
			for i := range emb {
				emb[i] = float32(rng.NormFloat64())
				emb64[i] = float64(emb[i])
			}
			b := randomBatch(rng, c, tc.R, tc.T, tc.kl > 0)
			m := &hostHead{p: p, emb: emb, threads: tc.threads}
			g := NewParams(c)
			res := m.forward(b, tc.kl, g)
			ref := toRef(p)
			want := refLoss(c, ref, emb64, b, float64(tc.kl))
			if math.Abs(res.Loss-want) > 1e-5*math.Max(1, math.Abs(want)) {
				t.Errorf("forward(%s): loss %.8g, float64 reference %.8g", tc.name, res.Loss, want)
			}
			const h = 1e-5
			for _, gt := range g.List {
				v := ref[gt.Name]
				var maxErr, maxG float64
				for i := range v {
					x := v[i]
					v[i] = x + h
					up := refLoss(c, ref, emb64, b, float64(tc.kl))
					v[i] = x - h
					down := refLoss(c, ref, emb64, b, float64(tc.kl))
					v[i] = x
					fd := (up - down) / (2 * h)
					maxErr = math.Max(maxErr, math.Abs(fd-float64(gt.Data[i])))
					maxG = math.Max(maxG, math.Abs(fd))
				}
				if maxG == 0 && c.RNN && gt.Name != "rnn_u.weight" {
					t.Errorf("%s: finite differences are all zero; the test does not exercise this tensor", gt.Name)
				}
				if maxErr > 1e-4*math.Max(1, maxG) {
					t.Errorf("gradient of %s: max |analytic − finite difference| = %.3g (max |grad| %.3g)", gt.Name, maxErr, maxG)
				}
			}
		})
	}
}
