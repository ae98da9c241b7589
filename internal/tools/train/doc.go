// Package train trains ReDrafter draft heads by distillation from their LLM
// (arXiv 2403.09919 §3.5): the LLM continues a set of prompts, and the head
// learns to predict the LLM's own next tokens from the LLM's final-norm
// hidden state, teacher-forced over T positions exactly as the reference
// trainer's forward (apple/ml-recurrent-drafter train/model.py).
//
// # Distillation sets
//
// [Distill] writes a distillation set to a directory:
//
//	meta.json            the settings it was made with (Meta)
//	shard-00000.jsonl    one Record per line, one shard per batch of prompts
//	shard-00001.jsonl    …
//
// A Record is {"prompt": i, "sample": k, "prompt_len": n, "tokens": [...],
// "stop": "eos"|"length"|"stop"}: prompt i of the prompt file (from 0),
// its k-th continuation, and the token ids of the encoded prompt (BOS
// included, n tokens) followed by the LLM's continuation. The stop token
// (EOS) is not stored. Shards are written under a temporary name and
// renamed, so a directory never holds a partial shard, and a rerun skips
// every (prompt, sample) already present.
//
// # Training
//
// At position t of a sequence x, with h_t the LLM's final-norm hidden state
// (which predicts x_{t+1}) and e the LLM's input embedding table, step
// i = 1..T of the head reads the true tokens x_{t+1..t+i} and predicts
// x_{t+i+1}:
//
//	s_0 = 0
//	s_i = SiLU(rnn_w·e(x_{t+i}) + rnn_u·s_{i-1} + b_u)
//	z_i = lm_head(ResBlocks([h_t; s_i]))          raw logits, no top-50 warp
//
// The loss is Σ_i mean_t CE(z_i, x_{t+i+1}) over the labels the LLM wrote
// (prompt tokens are not labels), plus, with a KL weight w > 0,
// w·Σ_i mean_t KL(p_LLM(·|x_{≤t+i}) ‖ softmax(z_i)), the LLM's soft
// distribution at the same position, which its logits give for free.
// Gradients are written by hand (f32, on the host, matrix products through
// package hostmath, which runs the CPU backend's kernels when the program
// links that backend, as every program that loads an Engine does); the optimiser is AdamW with linear warm-up, cosine
// decay and global-norm clipping.
package train
