#!/usr/bin/env bash
# compare-llamacpp.sh measures redrafter beside llama.cpp on the same GGUF
# file and thread counts, interleaved so that the machine's drift (memory
# bandwidth changes from day to day here, and other work comes and goes)
# falls on both alike. llama.cpp is built by hand outside this repository
# (docs/BENCHMARKS.md says how); nothing of it is committed.
#
#   LLAMA_BENCH=/path/to/llama-bench scripts/compare-llamacpp.sh MODEL.gguf HEAD_DIR [THREADS ...]
#
# For each thread count (default: 1 2), twice over: llama-bench's decode
# (tg32) and prefill (pp256), then `redrafter bench` (autoregressive decoding
# with the read bandwidth measured in the same run, and ReDrafter W=1 L=5
# (BEAM_LENGTH=7: L=7, the better setting for a 4-bit model with a narrow
# head, docs/BENCHMARKS.md) on
# LIMIT (default 8) held-out openings of PROMPTS (default stories260K's
# held-out set; a head's tokens per step varies a lot from opening to
# opening, so few openings flatter or wrong it), outputs checked identical,
# and the median of ten
# forward passes over 256 new tokens, the prefill figure). Output: one line
# per figure, for docs/BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: LLAMA_BENCH=... $0 MODEL.gguf HEAD_DIR [THREADS ...]}
head=${2:?usage: LLAMA_BENCH=... $0 MODEL.gguf HEAD_DIR [THREADS ...]}
shift 2
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(1 2)
[ -f "$model" ] || { echo "$model: no such file" >&2; exit 1; }
: "${LLAMA_BENCH:?set LLAMA_BENCH to the llama-bench binary of a llama.cpp build}"
bin=bin/redrafter
beamLength=${BEAM_LENGTH:-5}
limit=${LIMIT:-8}
prompts=${PROMPTS:-models/stories260K/distill/prompts-heldout.txt}
[ -f "$prompts" ] || { echo "$prompts: no such file" >&2; exit 1; }
go build -o "$bin" ./cmd/redrafter

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), $model, $(nproc) CPUs, $limit openings of $prompts"
for round in 1 2; do
	for t in "${threads[@]}"; do
		tag="round $round threads $t load $(cut -d' ' -f1 /proc/loadavg)"
		tg=$("$LLAMA_BENCH" -m "$model" -t "$t" -n 32 -p 0 -r 3 -o csv 2>/dev/null | tail -1 | awk -F, '{gsub(/"/, "", $(NF-1)); print $(NF-1)}')
		pp=$("$LLAMA_BENCH" -m "$model" -t "$t" -n 0 -p 256 -r 3 -o csv 2>/dev/null | tail -1 | awk -F, '{gsub(/"/, "", $(NF-1)); print $(NF-1)}')
		echo "$tag  llama.cpp: tg32 $tg tok/s, pp256 $pp tok/s"
		"$bin" --log-level warn bench --model "$model" --drafter "$head" --threads "$t" \
			--prompts "$prompts" --limit "$limit" --max-tokens 64 \
			--beam-width 1 --beam-length "$beamLength" --passes 256 --passes-after 1 |
			awk -v tag="$tag" -v L="$beamLength" '
				/^memory/ {bw = $0}
				/^autoregressive/ {ar = $0}
				/read per token/ {frac = $0; sub(/^ +/, "", frac)}
				$1 == 1 && $2 == L && NF > 10 {rd = $3 " tok/s, " $4 ", " $5 " tok/step"}
				/^ +256 +1 / {pp = $4}
				END {print tag "  redrafter: " ar "; " frac "; ReDrafter W1 L" L " " rd "; pass over 256 tokens " pp " tok/s"}'
	done
done
