#!/usr/bin/env bash
# cuda-device-check.sh runs the checks only a machine with an NVIDIA GPU can
# make, in one go that fits in about 8 minutes, and writes each step's
# output to OUT_DIR (docs/CUDA.md, "On a real GPU"). It needs no Go and no
# CUDA toolkit there, only the driver: build the binaries where Go is, with
#
#   go build -tags cuda -o BIN/redrafter ./cmd/redrafter
#   go build -tags cuda -o BIN/gpucheck ./internal/cmd/gpucheck
#   go test -c -tags cuda -o BIN/cudatest.test ./internal/backend/cuda/cudatest
#
# (BIN/*.gz are unpacked first, for a transfer with a size limit) then, in
# the repository root on the GPU machine:
#
#   BASELINE=PATH scripts/cuda-device-check.sh BIN OUT_DIR
#
# BASELINE is a redrafter binary of an earlier commit built the same way:
# each benchmark runs with it too, in the same call on the same GPU.
#
# What it runs (issue #32 item 7): the self-test (every kernel against the
# CPU reference on the GPU) and greedy generation equal to the CPU's on the
# GPU; then on the TinyLlama-shaped f16 model (made here by dev inflate) and
# its 4-bit quantization, `bench` at W=1 L=5 with a decode pass timed after
# 128 and after 2000 cached tokens, for: the new binary (fused layers, CUDA
# graphs), and in f16 the new binary with graphs off
# (REDRAFTER_CUDA_GRAPHS=off) and with fused layers off
# (REDRAFTER_FUSED_LAYERS=off), and BASELINE; an Nsight
# Compute summary of a few decode steps' kernels; compute-sanitizer
# racecheck over the self-test's kernels. VARIANTS_f16 and VARIANTS_q4
# add runs of the new binary under other switches (in all(), below).
# OUT_DIR gets check.log (every step, and a SUMMARY line per benchmark at
# the end) and bench-*.json.
# Each step has a time limit, so one that hangs does not take the rest.
set -u -o pipefail
bin=${1:?usage: cuda-device-check.sh BIN OUT_DIR}
out=${2:?usage: cuda-device-check.sh BIN OUT_DIR}
for z in "$bin"/*.gz; do
	[ -e "$z" ] && gunzip -f "$z" && chmod +x "${z%.gz}"
done
[ -n "${BASELINE:-}" ] && [ -e "$BASELINE.gz" ] && gunzip -f "$BASELINE.gz" && chmod +x "$BASELINE"
r=$bin/redrafter
gpucheck=$bin/gpucheck # the GPU self-test (internal/cmd/gpucheck)
mkdir -p "$out" .cache
stories=models/stories260K/stories260K.gguf
prompts=models/stories260K/distill/prompts-heldout.txt

log=$out/check.log
# shellcheck source=scripts/steps.sh
. "$(dirname "$0")/steps.sh"

# bench NAME BIN MODEL HEAD [VAR=VALUE...]: ReDrafter W1 L5 against
# decoding on one prompt, and one-token passes after 128 and after 2000
# cached tokens (decoding at a long context), into OUT_DIR/bench-NAME*.json.
bench() {
	local name=$1 b=$2 model=$3 head=$4
	shift 4
	step "bench-$name" 75 env "$@" "$b" bench --backend cuda --model "$model" --drafter "$head" --prompts "$prompts" \
		--limit 2 --max-tokens 128 --beam-width 1 --beam-length 5 --passes 1,5,17 --passes-after 128 --json "$out/bench-$name.json"
	case $name in *-narrow* | *-nographs | *-unfused) return ;; esac # the long context: new and baseline only
	step "ctx2000-$name" 60 env "$@" "$b" bench --backend cuda --model "$model" --drafter "$head" --prompts "$prompts" \
		--limit 1 --max-tokens 16 --beam-width 1 --beam-length 5 --passes 1 --passes-after 2000 --json "$out/bench-$name-ctx2000.json"
}

# all NAME MODEL HEAD [VARIANTS]: bench with the new binary, then (f16)
# with graphs off and with fused layers off, then with BASELINE.
all() {
	bench "$1" "$r" "$2" "$3"
	if [ -n "${4:-}" ]; then
		bench "$1-nographs" "$r" "$2" "$3" REDRAFTER_CUDA_GRAPHS=off
		bench "$1-unfused" "$r" "$2" "$3" REDRAFTER_FUSED_LAYERS=off
	fi
	[ -n "${BASELINE:-}" ] && bench "$1-baseline" "$BASELINE" "$2" "$3"
	# VARIANTS_<NAME>: more runs of the new binary, "label:VAR=VALUE ...",
	# separated by spaces (e.g. VARIANTS_q4="cols4:REDRAFTER_CUDA_QMV1_COLS=4").
	local v vs var="VARIANTS_$1"
	for v in ${!var:-}; do
		IFS=, read -r -a vs <<<"${v#*:}"
		bench "$1-${v%%:*}" "$r" "$2" "$3" "${vs[@]}"
	done
}

step gpu 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
step selftest 90 "$gpucheck" --backend cuda --seed 3
step tests 90 "$bin/cudatest.test" -test.run 'OnGPU' -test.v -test.count=1

tl=.cache/tinyllama-shaped-f16.gguf
[ -f "$tl" ] || step inflate 90 "$r" dev inflate --model "$stories" --drafter models/stories260K/drafter --out "$tl"
all f16 "$tl" "${tl%.gguf}-drafter" variants

# The same head inflated with 1024-wide blocks behind an input projection
# instead of blocks twice the hidden size: the same drafts, a quarter of
# the bytes a draft step reads (scripts/make-inflated-q4-head.sh).
narrow=.cache/head-narrow
[ -d "$narrow" ] || step narrow-head 90 bash -c "'$r' dev inflate --model '$stories' --drafter models/stories260K/drafter --out .cache/x.gguf --drafter-out '$narrow' --drafter-exit-dim 1024 && rm -f .cache/x.gguf"
bench f16-narrow "$r" "$tl" "$narrow"
[ -n "${BASELINE:-}" ] && bench f16-narrow-baseline "$BASELINE" "$tl" "$narrow"

q4=.cache/tl-q4
[ -d "$q4" ] || step quantize 120 "$r" quantize --in "$tl" --out "$q4" --bits 4 --group-size 64
all q4 "$q4" "${tl%.gguf}-drafter"

# Where a decode step's time goes: each kernel's time over 600 launches
# after the first 1500 (the prompt and a few tokens), fused layers with
# graphs (ncu profiles a graph's kernel nodes one by one).
# The clocks are left alone (--clock-control none), as for the benchmarks.
profile() {
	command -v ncu >/dev/null || return 0
	local name=$1 model=$2
	shift 2
	timeout 80 ncu --clock-control none --launch-skip 1500 --launch-count 600 --metrics gpu__time_duration.sum --print-summary per-kernel \
		"$r" generate --backend cuda --model "$model" --prompt "Once upon a time" --max-tokens 60 "$@" >"$out/profile-$name.txt" 2>&1
	echo "== profile $name: exit $? (profile-$name.txt)" | tee -a "$log"
}
profile f16 "$tl"
profile q4 "$q4"
# A ReDrafter generation's kernels: verification passes and the draft head.
profile f16-redrafter "$tl" --drafter "$narrow" --beam-width 1 --beam-length 5
profile q4-redrafter "$q4" --drafter "$narrow" --beam-width 1 --beam-length 5
# DETAIL="NAME:MODEL:KERNEL_REGEX ...": ncu's full sections (speed of
# light, occupancy, warp stalls, memory) for two calls of the kernels
# matching the regex after the first 40, while decoding MODEL (f16 or q4).
for d in ${DETAIL:-}; do
	IFS=: read -r dn dm dk <<<"$d"
	case $dm in q4) dm=$q4 ;; *) dm=$tl ;; esac
	timeout 60 ncu --clock-control none --kernel-name "regex:$dk" --launch-skip 40 --launch-count 2 --section SpeedOfLight --section Occupancy \
		--section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
		"$r" generate --backend cuda --model "$dm" --prompt "Once upon a time" --max-tokens 8 >"$out/detail-$dn.txt" 2>&1
	echo "== detail $dn: exit $? (detail-$dn.txt)" | tee -a "$log"
done
# Shared-memory races between warps, which the emulator (a block's threads
# in lockstep) cannot see, over every kernel the self-test reaches.
command -v compute-sanitizer >/dev/null &&
	step racecheck 80 compute-sanitizer --tool racecheck --error-exitcode 1 "$gpucheck" --backend cuda
# One line per benchmark, for the log of docs/benchmarks.
command -v python3 >/dev/null && python3 - "$out" <<'PY' | tee -a "$log"
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench-*.json"))):
    r = json.load(open(f))
    a, bw = r["autoregressive"], r["machine"].get("read_bandwidth_bytes_per_s", [0, 0])
    cells = " ".join("W%dL%d %.1f tok/s %.2fx %.2f tok/step" % (c["beam_width"], c["beam_length"], c["tokens_per_s"], c["speedup"], c.get("tokens_per_step", 0)) for c in r.get("redrafter", []))
    passes = " ".join("%d@%d %.3fms" % (p["tokens"], p["after_cached"], p["ms"]) for p in r.get("passes", []))
    print("SUMMARY %-22s decode %.1f tok/s (%.0f%% of %.0f GB/s) | %s | %s" % (os.path.basename(f)[6:-5], a["tokens_per_s"], 100 * a.get("bandwidth_fraction", 0), sum(bw) / 2e9, cells, passes))
PY
exit 0
