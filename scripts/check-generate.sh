#!/usr/bin/env bash
# Fails when the committed generated files of internal/backend/cpu/kernels (the amd64
# assembly and its Go declarations) differ from what their generators write.
# It runs each //go:generate line of the package as written, with its output
# directory (-dir .) replaced by a temporary one, and compares every file
# written there with the committed file of the same name. Nothing in the
# working tree is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
pkg=internal/backend/cpu/kernels

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

lines=$(grep -h '^//go:generate ' "$pkg"/*.go || true)
if [ -z "$lines" ]; then
	echo "check-generate: no //go:generate lines in $pkg" >&2
	exit 1
fi
while IFS= read -r line; do
	cmd=${line#//go:generate }
	case "$cmd" in
	"go run "*" -dir .") ;;
	*)
		echo "check-generate: $pkg: cannot redirect the output of: $line (want 'go run ... -dir .')" >&2
		exit 1
		;;
	esac
	cmd=${cmd#go }
	cmd=${cmd% -dir .}
	# shellcheck disable=SC2086 # the line's own words
	(cd "$pkg" && "$GO" $cmd -dir "$tmp")
done <<<"$lines"

n=0
stale=()
for f in "$tmp"/*; do
	[ -f "$f" ] || continue
	n=$((n + 1))
	name=$(basename "$f")
	if ! cmp -s "$f" "$pkg/$name"; then
		stale+=("$pkg/$name")
		diff -u "$pkg/$name" "$f" | head -20 >&2 || true
	fi
done
if [ "$n" -eq 0 ]; then
	echo "check-generate: the generators of $pkg wrote nothing" >&2
	exit 1
fi
if [ "${#stale[@]}" -gt 0 ]; then
	echo "check-generate: not what the generators write: ${stale[*]};" >&2
	echo "  edit the generators (not the generated files) and run: go generate ./$pkg/" >&2
	exit 1
fi
echo "check-generate: $n files in $pkg match their generators"
