#!/usr/bin/env bash
# make-inflated-q4-head.sh makes a draft head for a quantized *inflated*
# model (the TinyLlama-shaped benchmark model, `redrafter dev inflate` of
# stories260K, then `redrafter quantize`) the fast way: the quantized model
# is deflated back to the small shape (`redrafter dev deflate`: its padding
# is exact zeros, so the small model computes the same function), which
# distils every training prompt in seconds; the small head is fine-tuned on
# that, inflated back, quantized to 8 bits and measured on the quantized
# inflated model. scripts/make-q4-head.sh is the general recipe (any
# quantized model, distilled at its own speed). README.md, "A head for a
# 4-bit model", has the figures.
#
#   scripts/make-inflated-q4-head.sh SMALL.gguf SMALL_HEAD QUANTIZED_INFLATED OUT_DIR [STEPS]
#
# e.g. scripts/make-inflated-q4-head.sh models/stories260K/stories260K.gguf models/stories260K/drafter \
#          .cache/tl-q4 .cache/heads-deflated
#
# LAYERS=3 (default 2) makes a larger head instead of fine-tuning SMALL_HEAD:
# twice the training openings (cut from sampled continuations by `dev
# openings`, continued greedily), a 3-block head trained from scratch for
# STEPS (default then 12000) at --lr 2e-3, then 4000 steps more at 5e-4.
# 45 minutes here; 3.42 tokens per step at W=1 L=5 on the Q4_0 file, the
# 2-block head 3.39 (3.30-3.31 and 3.26-3.28 before the CPU's VNNI kernels
# multiplied the biases by the rounded x's sums; docs/BENCHMARKS.md).
#
# EXIT_DIM=1024 inflates the head with blocks 1024 wide behind an input
# projection instead of 2x the hidden size (4096): a quarter of the bytes
# to read per draft step (16.5 MiB at 8 bits against 62), the same drafts.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: $0 SMALL.gguf SMALL_HEAD QUANTIZED_INFLATED OUT_DIR [STEPS]"
small=${1:?$usage}
init=${2:?$usage}
model=${3:?$usage}
out=${4:?$usage}
layers=${LAYERS:-2}
steps=${5:-$([ "$layers" = 2 ] && echo 4000 || echo 12000)}
bin=bin/redrafter
go build -o "$bin" ./cmd/redrafter
mkdir -p "$out"
prompts=models/stories260K/distill
head -n 40 "$prompts/prompts-heldout.txt" >"$out/prompts-heldout.txt"

# 1. The quantized model cut back to the small shape.
"$bin" dev deflate --model "$model" --like "$small" --out "$out/deflated.gguf"

# 2. Its greedy continuations of every training opening (256 tokens: at this
#    speed, longer stories are cheap data) and of the held-out ones.
if [ "$layers" = 2 ]; then
	"$bin" distill --model "$out/deflated.gguf" --prompts "$prompts/prompts-train.txt" --out "$out/train" --max-tokens 256
fi
"$bin" distill --model "$out/deflated.gguf" --prompts "$out/prompts-heldout.txt" --out "$out/heldout" --max-tokens 96

# resume prints --resume when the head in $1 holds a training state.
resume() { [ -f "$1/training_state.safetensors" ] && echo --resume || true; }

if [ "$layers" = 2 ]; then
	# 3. Fine-tune the small model's head on them (resumed if interrupted).
	"$bin" train-drafter --model "$out/deflated.gguf" --data "$out/train" --eval-data "$out/heldout" --out "$out/head-small" \
		--init "$init" --steps "$steps" --lr 3e-3 --eval-every 500 --save-every 500 $(resume "$out/head-small")
else
	# 3a. More distinct openings: two sampled continuations of each training
	#     opening, cut after 8-64 generated tokens, with the training openings
	#     themselves; all of them continued greedily (the labels a greedy
	#     head must learn; labelling the samples themselves lowers accuracy).
	"$bin" distill --model "$out/deflated.gguf" --prompts "$prompts/prompts-train.txt" --out "$out/sampled" \
		--max-tokens 256 --temperature 0.8 --samples-per-prompt 2 --seed 7
	"$bin" dev openings --model "$out/deflated.gguf" --data "$out/sampled" --out "$out/openings.txt"
	cat "$prompts/prompts-train.txt" "$out/openings.txt" >"$out/prompts-train-more.txt"
	"$bin" distill --model "$out/deflated.gguf" --prompts "$out/prompts-train-more.txt" --out "$out/train-more" --max-tokens 256
	# 3b. A head of $layers blocks from scratch, then a slower second run.
	"$bin" train-drafter --model "$out/deflated.gguf" --data "$out/train-more" --eval-data "$out/heldout" \
		--out "$out/head-small-from-scratch" --layers "$layers" --steps "$steps" --lr 2e-3 --eval-every 1000 --save-every 1000 \
		$(resume "$out/head-small-from-scratch")
	"$bin" train-drafter --model "$out/deflated.gguf" --data "$out/train-more" --eval-data "$out/heldout" --out "$out/head-small" \
		--init "$out/head-small-from-scratch" --layers "$layers" --steps 4000 --lr 5e-4 --eval-every 1000 --save-every 1000 \
		$(resume "$out/head-small")
fi

# 4. Inflate the head with the model it was trained for (the inflated model
#    written alongside is not needed: the quantized one is the target).
"$bin" dev inflate --model "$small" --drafter "$out/head-small" --out "$out/inflated.gguf" --drafter-out "$out/head" \
	--drafter-exit-dim "${EXIT_DIM:-0}"
rm -f "$out/inflated.gguf"
"$bin" quantize --in "$out/head" --out "$out/head-q8" --bits 8 --group-size 64 --force

# 5. Tokens per step on the held-out openings (greedy; outputs checked identical).
"$bin" train-drafter --model "$model" --out "$out/head-q8" --eval-only --eval-prompts "$out/prompts-heldout.txt" \
	--eval-beams 1x5,4x5 --eval-max-tokens 96
