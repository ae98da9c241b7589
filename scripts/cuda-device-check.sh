#!/usr/bin/env bash
# cuda-device-check.sh runs the checks only a machine with an NVIDIA GPU can
# make, in one go, and writes each step's output to OUT_DIR (docs/CUDA.md,
# "On a real GPU"). It needs no Go and no CUDA toolkit there, only the
# driver: build the binaries where Go is, with
#
#   go build -tags cuda -o BIN/redrafter ./cmd/redrafter
#   go build -tags cuda -o BIN/gpucheck ./internal/cmd/gpucheck
#   go test -c -tags cuda -o BIN/cudatest.test ./internal/backend/cuda/cudatest
#
# then, in the repository root on the GPU machine:
#
#   scripts/cuda-device-check.sh BIN OUT_DIR [HEAD_SMALL]
#
# OUT_DIR gets check.log (every step's output), bench-f16.json and
# bench-q4.json (and their -baseline twins), and profile-f16.txt and
# profile-q4.txt (each kernel's time on the GPU while decoding, from Nsight
# Compute, where ncu is installed).
#
# HEAD_SMALL (scripts/make-inflated-q4-head.sh's head-small) gives the
# 4-bit model its fine-tuned head, inflated and quantized to 8 bits as that
# script does; without it the 4-bit model is measured with the inflated
# bundled head.
# BASELINE=PATH (a redrafter binary of an earlier commit, built the same
# way) runs each bench again with it, in the same run on the same GPU, for
# a side-by-side comparison (bench-*-baseline.json).
# Each step has a time limit, so one that hangs does not take the rest.
set -u -o pipefail
bin=${1:?usage: cuda-device-check.sh BIN OUT_DIR [HEAD_SMALL]}
out=${2:?usage: cuda-device-check.sh BIN OUT_DIR [HEAD_SMALL]}
small_head=${3:-}
r=$bin/redrafter
gpucheck=$bin/gpucheck # the GPU self-test (internal/cmd/gpucheck)
mkdir -p "$out" .cache
stories=models/stories260K/stories260K.gguf
prompts=models/stories260K/distill/prompts-heldout.txt

log=$out/check.log
# shellcheck source=scripts/steps.sh
. "$(dirname "$0")/steps.sh"

# profile NAME MODEL: each kernel's time on the GPU over the launches of
# 2000 launches (about 4 tokens) after the first 2000 (the prompt and 3
# tokens) of a generation, by Nsight Compute.
profile() {
	command -v ncu >/dev/null || return 0
	timeout 120 ncu --launch-skip 2000 --launch-count 2000 --metrics gpu__time_duration.sum --print-summary per-kernel \
		"$r" generate --backend cuda --model "$2" --prompt "Once upon a time" --max-tokens 24 >"$out/profile-$1.txt" 2>&1
	echo "== profile $1: exit $? (profile-$1.txt)" | tee -a "$log"
}

# bench NAME MODEL HEAD: the W × L sweep and the pass costs, into
# OUT_DIR/bench-NAME.json, then the same with BASELINE if it is set.
bench() {
	local b name
	for b in "$r" ${BASELINE:+"$BASELINE"}; do
		name=$1
		[ "$b" = "$r" ] || name=$1-baseline
		step "bench-$name" 150 "$b" bench --backend cuda --model "$2" --drafter "$3" --prompts "$prompts" \
			--limit 2 --max-tokens 128 --beam-width 1,2,4 --beam-length 3,5 --passes 1,5,9,17,33,65,129,256,257 \
			--json "$out/bench-$name.json"
	done
}

step gpu 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
step devices 60 "$r" devices
step selftest 120 "$gpucheck" --backend cuda --seed 3
step tests 150 "$bin/cudatest.test" -test.run 'OnGPU' -test.v -test.count=1
step demo 120 "$r" generate --backend cuda --model "$stories" --prompt "Once upon a time" --max-tokens 128 --stats \
	--drafter models/stories260K/drafter --beam-width 4 --beam-length 5

# NVIDIA's sanitizers over every kernel once: out-of-bounds accesses
# (memcheck) and shared-memory races between warps (racecheck), which the
# emulator, running a block's threads in lockstep, cannot see.
if command -v compute-sanitizer >/dev/null; then
	step memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 1 "$gpucheck" --backend cuda
	step racecheck 90 compute-sanitizer --tool racecheck --error-exitcode 1 "$gpucheck" --backend cuda
fi

tl=.cache/tinyllama-shaped-f16.gguf
[ -f "$tl" ] || step inflate 90 "$r" dev inflate --model "$stories" --drafter models/stories260K/drafter --out "$tl"
bench f16 "$tl" "${tl%.gguf}-drafter"

profile f16 "$tl"

q4=.cache/tl-q4
[ -d "$q4" ] || step quantize 120 "$r" quantize --in "$tl" --out "$q4" --bits 4 --group-size 64
head=${tl%.gguf}-drafter
if [ -n "$small_head" ]; then
	head_q4 "$small_head"
	head=.cache/head-q4
fi
bench q4 "$q4" "$head"
profile q4 "$q4"
