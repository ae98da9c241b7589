package redrafter

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

// Perplexity is the model's average surprise on some text.
type Perplexity struct {
	Tokens    int     // tokens scored (every token of each sequence but its first)
	NLL       float64 // total negative log-likelihood in nats
	Sequences int
}

// Value is exp(NLL/Tokens).
func (p Perplexity) Value() float64 {
	if p.Tokens == 0 {
		return math.NaN()
	}
	return math.Exp(p.NLL / float64(p.Tokens))
}

// Perplexity scores each sequence from an empty context: the negative
// log-likelihood of every token after the first given the ones before it,
// from the model's logits (log-softmax in float64). Sequences longer than
// the context are an error. It runs the sequences in chunks of up to chunk
// tokens (0: 64; powers of two), each with its logits for every position.
func (e *Engine) Perplexity(ctx context.Context, seqs [][]int32, chunk int) (Perplexity, error) {
	if chunk <= 0 {
		chunk = 64
	}
	var res Perplexity
	longest := 0
	for _, s := range seqs {
		longest = max(longest, len(s))
	}
	if longest > e.context {
		return res, fmt.Errorf("redrafter: perplexity: a sequence of %d tokens exceeds the context of %d", longest, e.context)
	}
	if longest < 2 {
		return res, errors.New("redrafter: perplexity: no sequence has two tokens")
	}
	st, err := e.runner.NewState(longest)
	if err != nil {
		return res, err
	}
	defer st.Close()
	v := e.cfg.Vocab
	logits := make([]float32, chunk*v)
	for _, seq := range seqs {
		if len(seq) < 2 {
			continue
		}
		st.Trim(0)
		in := seq[:len(seq)-1] // each position predicts the next token
		for p := 0; p < len(in); {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			n := 1 // powers of two, so a few compiled plans serve every length
			for n*2 <= min(chunk, len(in)-p) {
				n *= 2
			}
			if err := st.Forward(llama.Chain(in[p:p+n], true), logits[:n*v], nil); err != nil {
				return res, publicError(err)
			}
			st.Advance(n)
			for i := range n {
				res.NLL -= logProb(logits[i*v:(i+1)*v], seq[p+i+1])
			}
			res.Tokens += n
			p += n
		}
		res.Sequences++
	}
	return res, nil
}

// logProb is log softmax(logits)[id], in float64.
func logProb(logits []float32, id int32) float64 {
	m := math.Inf(-1)
	for _, l := range logits {
		m = max(m, float64(l))
	}
	var s float64
	for _, l := range logits {
		s += math.Exp(float64(l) - m)
	}
	return float64(logits[id]) - m - math.Log(s)
}
