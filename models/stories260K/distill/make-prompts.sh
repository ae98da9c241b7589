#!/usr/bin/env bash
# Story openings for distilling the stories260K draft head. The model is the
# only story source here, so each opening is the first 4-12 words of a story
# the model itself samples from BOS at temperature 1 (one seed per story).
# Training prompts use seeds 1..N, held-out prompts seeds 1000001..; any
# held-out opening that is also a training opening is dropped.
#
#   models/stories260K/distill/make-prompts.sh [N_TRAIN] [N_HELDOUT]
set -euo pipefail
cd "$(dirname "$0")"
ntrain=${1:-3000}
nheld=${2:-200}
bin=../../../bin/redrafter
model=../stories260K.gguf
[ -x "$bin" ] || (cd ../../.. && go build -o bin/redrafter ./cmd/redrafter)

openings() { # first seed, count
	for ((s = $1; s < $1 + $2; s++)); do
		"$bin" generate --backend cpu --threads 1 --model "$model" --temperature 1 --seed "$s" --max-tokens 24 |
			awk -v k=$((4 + s % 9)) 'NR == 1 { o = $1; for (i = 2; i <= k && i <= NF; i++) o = o " " $i; print o }'
	done
}
openings 1 "$ntrain" | awk 'NF && !seen[$0]++' >prompts-train.txt
openings 1000001 "$nheld" | awk 'NF && !seen[$0]++' | grep -vxF -f prompts-train.txt >prompts-heldout.txt
wc -l prompts-train.txt prompts-heldout.txt
