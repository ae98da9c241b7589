#!/usr/bin/env bash
# cpu-scaling.sh measures CPU decoding from one thread to every core of the
# machine it runs on, with the read bandwidth measured in the same run, and
# optionally llama.cpp's decoding on the same files and thread counts beside
# it (docs/BENCHMARKS.md, "Thread scaling on 16 cores"). It is for machines
# with more cores than the 2 of the development machine: a Linux server, or
# the host of a lent GPU machine. It needs no Go there: build redrafter where
# Go is (`go build -o BIN/redrafter ./cmd/redrafter`), then, in the
# repository root:
#
#   scripts/cpu-scaling.sh BIN OUT_DIR [THREADS]
#
# THREADS is a comma-separated list (default 1, 2, 4, ... up to all cores).
# OUT_DIR gets scaling.log (every step's output), bench-f16.json and
# bench-q4.json (redrafter bench, autoregressive and ReDrafter W=1 L=5 at
# each thread count, and the cost of a 5-token verification pass against a
# 1-token one), profile-q4-N.prof and profile-f16-N.prof (CPU profiles at
# the largest thread count N) and, with LLAMA set, llama-f16.json and
# llama-q4.json.
#
# LLAMA=DIR (a llama.cpp build's bin directory, with llama-bench,
# llama-quantize and their shared libraries) makes the 4-bit model a GGUF
# Q4_0 by llama.cpp's quantizer and runs llama-bench -n 64 on both files at
# the same thread counts; LLAMA_QUANTIZE=FILE takes llama-quantize from
# another build (that of a GGML_BACKEND_DL build crashes). Without LLAMA the
# 4-bit model is `redrafter quantize --bits 4 --group-size 64`.
# HEAD_SMALL=DIR (a small head made by scripts/make-inflated-q4-head.sh)
# gives the 4-bit model that head, inflated and quantized to 8 bits; without
# it the bundled head, inflated.
# Each step has a time limit, so one that hangs does not take the rest.
set -u -o pipefail
usage="usage: $0 BIN OUT_DIR [THREADS]"
bin=${1:?$usage}
out=${2:?$usage}
threads=${3:-}
if [ -z "$threads" ]; then
	n=$(nproc)
	t=1 threads=1
	while [ $((t * 2)) -le "$n" ]; do
		t=$((t * 2))
		threads+=",$t"
	done
	[ "$t" -eq "$n" ] || threads+=",$n"
fi
r=$bin/redrafter
mkdir -p "$out" .cache
stories=models/stories260K/stories260K.gguf
prompts=models/stories260K/distill/prompts-heldout.txt

log=$out/scaling.log
# shellcheck source=scripts/steps.sh
. "$(dirname "$0")/steps.sh"

step machine 20 bash -c 'lscpu; command -v numactl >/dev/null && numactl --hardware; free -g; uptime'

tl=.cache/tinyllama-shaped-f16.gguf
[ -f "$tl" ] || step inflate 180 "$r" dev inflate --model "$stories" --drafter models/stories260K/drafter --out "$tl"

head=${tl%.gguf}-drafter
if [ -n "${HEAD_SMALL:-}" ]; then
	head_q4 "$HEAD_SMALL"
	head=.cache/head-q4
fi
if [ -n "${LLAMA:-}" ]; then
	export LD_LIBRARY_PATH=$LLAMA${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	q4=.cache/tle-Q4_0.gguf
	# LLAMA_QUANTIZE: a llama-quantize built without GGML_BACKEND_DL, whose
	# own llama-quantize crashes (c392e50) before it writes anything.
	qz=${LLAMA_QUANTIZE:-$LLAMA/llama-quantize}
	[ -f "$q4" ] || step quantize 120 env LD_LIBRARY_PATH="$(dirname "$qz")" "$qz" "$tl" "$q4" Q4_0
else
	q4=.cache/tl-q4
	[ -d "$q4" ] || step quantize 120 "$r" quantize --in "$tl" --out "$q4" --bits 4 --group-size 64
fi

# sweep NAME MODEL HEAD: redrafter bench at every thread count, then
# llama-bench on the same file and thread counts.
sweep() {
	step "bench-$1" 400 "$r" bench --backend cpu --model "$2" --drafter "$3" --prompts "$prompts" --limit 2 \
		--max-tokens 64 --beam-width 1 --beam-length 5 --passes 1,5 --threads "$threads" --json "$out/bench-$1.json"
	if [ -n "${LLAMA:-}" ] && [ "${2##*.}" = gguf ]; then
		# The JSON to a file, the table (-oe md) and llama.cpp's log to scaling.log.
		step "llama-$1" 400 bash -c '"$0" -m "$1" -p 0 -n 64 -r 2 -t "$2" -o json -oe md >"$3"' \
			"$LLAMA/llama-bench" "$2" "$threads" "$out/llama-$1.json"
	fi
}
sweep q4 "$q4" "$head"
sweep f16 "$tl" "${tl%.gguf}-drafter"

# A CPU profile of each model at the largest thread count (decoding,
# ReDrafter and the 1- and 5-token passes), for `go tool pprof BIN/redrafter
# OUT_DIR/profile-*.prof` where the binary was built.
most=${threads##*,}
for m in "q4 $q4 $head" "f16 $tl ${tl%.gguf}-drafter"; do
	read -r name model drafter <<<"$m"
	step "profile-$name" 120 "$r" bench --backend cpu --threads "$most" --model "$model" --drafter "$drafter" --prompts "$prompts" \
		--limit 1 --max-tokens 64 --beam-width 1 --beam-length 5 --passes 1,5 --cpuprofile "$out/profile-$name-$most.prof"
done
