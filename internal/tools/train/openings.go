package train

import "math/rand/v2"

// Openings makes new prompts from a distillation set: each record cut after
// a uniformly drawn minNew…maxNew of its continuation's tokens (all of it when
// shorter) and turned back into text by decode, in record order, without
// empty or repeated ones. Cut from sampled continuations (distill
// --temperature) and continued greedily, they give a draft head more
// distinct contexts with the greedy labels it must learn; labelling the
// samples themselves teaches it tokens greedy decoding would not pick.
// The same seed gives the same openings.
func Openings(s *Set, decode func([]int32) string, minNew, maxNew int, seed uint64) []string {
	minNew = max(minNew, 0)
	maxNew = max(maxNew, minNew)
	r := rand.New(rand.NewPCG(seed, 0x6f70656e))
	seen := map[string]bool{}
	var out []string
	for _, rec := range s.Records {
		n := min(len(rec.Tokens), rec.PromptLen+minNew+r.IntN(maxNew-minNew+1))
		text := decode(rec.Tokens[:n])
		if text == "" || seen[text] {
			continue
		}
		seen[text] = true
		out = append(out, text)
	}
	return out
}
