#!/usr/bin/env bash
# serve-load.sh measures `redrafter serve` under load: for each number of
# concurrent streaming clients, autoregressive decoding and ReDrafter (the
# engine's default beam under the group's row budget), interleaved so that
# the machine's drift falls on both alike. Each load is `redrafter dev
# loadtest --check`: every greedy text under load must equal the prompt's
# text alone, and the server's goroutines and heap are read before and
# after. Output: one markdown table row per run, for docs/BENCHMARKS.md.
#
#   scripts/serve-load.sh MODEL HEAD_DIR [CLIENTS ...]      (default clients: 1 4 16)
#
# Environment: PARALLEL (slots, default 16), MAX_TOKENS (default 32),
# REQUESTS_PER_CLIENT (default 4), MIN_REQUESTS (default 8), CONTEXT (512).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: $0 MODEL HEAD_DIR [CLIENTS ...]}
head=${2:?usage: $0 MODEL HEAD_DIR [CLIENTS ...]}
shift 2
clients=("$@")
[ ${#clients[@]} -gt 0 ] || clients=(1 4 16)
parallel=${PARALLEL:-16}
max_tokens=${MAX_TOKENS:-32}
per_client=${REQUESTS_PER_CLIENT:-4}
min_requests=${MIN_REQUESTS:-8}
context=${CONTEXT:-512}
bin=bin/redrafter
go build -o "$bin" ./cmd/redrafter
port=$((20000 + RANDOM % 20000))
log=$(mktemp)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -f "$log"' EXIT

serve() { # $1: "" or "--drafter DIR"
	# shellcheck disable=SC2086
	"$bin" serve --model "$model" $1 --port "$port" --parallel "$parallel" --queue 256 --context "$context" 2>"$log" &
	server=$!
	for _ in $(seq 600); do
		curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return
		kill -0 "$server" 2>/dev/null || { cat "$log" >&2; exit 1; }
		sleep 0.1
	done
	echo "the server did not come up" >&2
	exit 1
}

stop() {
	kill -INT "$server"
	wait "$server" || true
	server=
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), $model, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); --parallel $parallel, --max-tokens $max_tokens, $per_client requests per client (at least $min_requests)"
echo "| clients | ReDrafter | requests/s | tokens/s | TTFT p50 / p99 | per token p50 / p99 | tokens/step | texts equal alone | goroutines before → after | heap MiB before → after |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for n in "${clients[@]}"; do
	requests=$((n * per_client))
	[ "$requests" -ge "$min_requests" ] || requests=$min_requests
	for drafter in off on; do
		args=""
		[ "$drafter" = on ] && args="--drafter $head"
		serve "$args"
		out=$("$bin" dev loadtest --url "http://127.0.0.1:$port" --clients "$n" --requests "$requests" \
			--max-tokens "$max_tokens" --check --timeout 20m 2>&1) || { echo "$out" >&2; stop; exit 1; }
		stop
		awk -v n="$n" -v d="$drafter" '
			/requests \(/ { for (i = 1; i <= NF; i++) { if ($i == "requests/s,") rps = $(i-1); if ($i == "tokens/s") tps = $(i-1) } }
			/time to first token/ { ttft = $6 " / " $12 " ms" }
			/time per output token/ { tpot = $6 " / " $12 " ms" }
			/tokens per step/ { tps_step = $2 }
			/greedy text equal/ { eq = $(NF-3) "/" $(NF-1) }
			/^server:/ { g = $2 " → " $7; h = $12 " → " $15 }
			END { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", n, d, rps, tps, ttft, tpot, (tps_step ? tps_step : "–"), eq, g, h }' <<<"$out"
	done
done
