# steps.sh: the pieces scripts/cuda-device-check.sh and scripts/cpu-scaling.sh
# share, sourced by both. They set log (the file every step's output is
# appended to), r (the redrafter binary) and stories (stories260K's GGUF).

# step NAME LIMIT CMD...: run CMD with a time limit, so one that hangs does
# not take the rest; its output here and in $log.
step() {
	local name=$1 limit=$2
	shift 2
	echo "== $name: $*" | tee -a "$log"
	local t0=$SECONDS
	timeout "$limit" "$@" 2>&1 | tee -a "$log"
	local rc=$?
	echo "== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$log"
}

# head_q4 SMALL_HEAD: the small head (scripts/make-inflated-q4-head.sh's
# head-small) inflated to the TinyLlama shape with blocks EXIT_DIM wide
# (default 1024, the narrow head of docs/BENCHMARKS.md; 0: twice the hidden
# size) and quantized to 8 bits, as that script does, into .cache/head-q4.
head_q4() {
	step head-q4 120 bash -c "'$r' dev inflate --model '$stories' --drafter '$1' --out .cache/x.gguf --drafter-out .cache/head-q4-f32 --drafter-exit-dim '${EXIT_DIM:-1024}' &&
		rm -f .cache/x.gguf && '$r' quantize --in .cache/head-q4-f32 --out .cache/head-q4 --bits 8 --group-size 64 --force"
}
