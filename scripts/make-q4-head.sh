#!/usr/bin/env bash
# make-q4-head.sh makes a draft head for a quantized model: the head made
# for the full-precision model, fine-tuned on the quantized model's own
# greedy continuations (train-drafter --init), then itself quantized to 8
# and 4 bits, each measured in tokens per step on held-out openings.
# README.md, "A head for a 4-bit model", says why and what it measured.
#
#   scripts/make-q4-head.sh QUANTIZED_MODEL F16_HEAD OUT_DIR [TRAIN_PROMPTS [STEPS]]
#
# e.g. scripts/make-q4-head.sh .cache/tle-Q4_0.gguf .cache/tinyllama-shaped-f16-drafter .cache/heads
# Rerunning resumes what an earlier run finished or left half done.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: $0 QUANTIZED_MODEL F16_HEAD OUT_DIR [TRAIN_PROMPTS [STEPS]]}
init=${2:?usage: $0 QUANTIZED_MODEL F16_HEAD OUT_DIR [TRAIN_PROMPTS [STEPS]]}
out=${3:?usage: $0 QUANTIZED_MODEL F16_HEAD OUT_DIR [TRAIN_PROMPTS [STEPS]]}
n=${4:-300}
steps=${5:-300}
bin=bin/redrafter
go build -o "$bin" ./cmd/redrafter
mkdir -p "$out"
prompts=models/stories260K/distill
head -n "$n" "$prompts/prompts-train.txt" >"$out/prompts-train.txt"
head -n 40 "$prompts/prompts-heldout.txt" >"$out/prompts-heldout.txt"

# 1. The quantized model's own greedy continuations (96 tokens each).
"$bin" distill --model "$model" --prompts "$out/prompts-train.txt" --out "$out/train" --max-tokens 96
"$bin" distill --model "$model" --prompts "$out/prompts-heldout.txt" --out "$out/heldout" --max-tokens 96

# 2. Fine-tune the full-precision model's head on them.
# A finished or interrupted run is resumed (a finished one ends at once).
resume=""
[ -f "$out/head/training_state.safetensors" ] && resume=--resume
"$bin" train-drafter --model "$model" --data "$out/train" --eval-data "$out/heldout" --out "$out/head" \
	--init "$init" --steps "$steps" --lr 3e-4 --eval-every 50 --save-every 50 $resume

# 3. The head itself at 8 and 4 bits (groups of 64, as the model).
"$bin" quantize --in "$out/head" --out "$out/head-q8" --bits 8 --group-size 64 --force
"$bin" quantize --in "$out/head" --out "$out/head-q4" --bits 4 --group-size 64 --force

# 4. Tokens per step on the held-out openings (greedy; outputs checked identical), for the
#    head made for the full-precision model and each new one.
for h in "$init" "$out/head" "$out/head-q8" "$out/head-q4"; do
	echo "== $h"
	"$bin" train-drafter --model "$model" --out "$h" --eval-only --eval-prompts "$out/prompts-heldout.txt" \
		--eval-beams 1x5,4x5 --eval-max-tokens 96
done
