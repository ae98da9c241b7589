package train

import "math"

// adamW is AdamW (Loshchilov & Hutter) as in torch.optim.AdamW: bias-
// corrected moments and weight decay decoupled from the gradient, applied
// to matrices only (not to biases), as the Hugging Face trainer does.
type adamW struct {
	beta1, beta2, eps, decay float64
	m, v                     *Params // first and second moments
	step                     int     // updates applied
}

func newAdamW(p *Params, decay float64) *adamW {
	return &adamW{beta1: 0.9, beta2: 0.999, eps: 1e-8, decay: decay, m: NewParams(p.Config), v: NewParams(p.Config)}
}

// update applies one step with learning rate lr to p given its gradient g.
func (o *adamW) update(p, g *Params, lr float64) {
	o.step++
	c1 := 1 - math.Pow(o.beta1, float64(o.step))
	c2 := 1 - math.Pow(o.beta2, float64(o.step))
	b1, b2 := float32(o.beta1), float32(o.beta2)
	for k, t := range p.List {
		gd, md, vd := g.List[k].Data, o.m.List[k].Data, o.v.List[k].Data
		shrink := float32(1)
		if len(t.Shape) > 1 {
			shrink = float32(1 - lr*o.decay)
		}
		step := float32(lr / c1)
		sc2 := float32(1 / math.Sqrt(c2))
		eps := float32(o.eps)
		for i, gi := range gd {
			md[i] = b1*md[i] + (1-b1)*gi
			vd[i] = b2*vd[i] + (1-b2)*gi*gi
			denom := float32(math.Sqrt(float64(vd[i])))*sc2 + eps
			t.Data[i] = t.Data[i]*shrink - step*md[i]/denom
		}
	}
}

// clipNorm scales g so that its global L2 norm is at most limit (limit ≤ 0:
// no clipping) and returns the norm before clipping.
func clipNorm(g *Params, limit float64) float64 {
	var ss float64
	for _, t := range g.List {
		for _, x := range t.Data {
			ss += float64(x) * float64(x)
		}
	}
	norm := math.Sqrt(ss)
	if limit > 0 && norm > limit {
		s := float32(limit / (norm + 1e-6))
		for _, t := range g.List {
			for i := range t.Data {
				t.Data[i] *= s
			}
		}
	}
	return norm
}

// schedule is the learning rate at step s (from 0) of n: linear warm-up
// over the first warmup steps, then cosine decay to zero at step n (the
// Hugging Face "cosine" schedule).
func schedule(base float64, s, n, warmup int) float64 {
	if s < warmup {
		return base * float64(s+1) / float64(warmup)
	}
	if n <= warmup {
		return base
	}
	progress := float64(s-warmup) / float64(n-warmup)
	return base * 0.5 * (1 + math.Cos(math.Pi*progress))
}
