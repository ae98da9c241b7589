#!/usr/bin/env bash
# Builds CRedrafter.xcframework (libredrafter.a for arm64 and x86_64, with
# redrafter.h and a module map) next to this script. Run it on a Mac with Go
# and the Xcode command-line tools: cgo needs Apple's SDK, so this cannot be
# cross-built from Linux. UNTESTED until a Mac runs it (docs/EMBEDDING.md).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
build="$here/.build-lib"
rm -rf "$build" "$here/CRedrafter.xcframework"
mkdir -p "$build/include"

for arch in arm64 amd64; do
	clang_arch=$arch
	[ "$arch" = amd64 ] && clang_arch=x86_64
	echo "libredrafter.a for darwin/$arch"
	(cd "$repo" && CGO_ENABLED=1 GOOS=darwin GOARCH=$arch \
		CC="xcrun --sdk macosx clang -arch $clang_arch -mmacosx-version-min=13.0" \
		CGO_CFLAGS="-mmacosx-version-min=13.0" CGO_LDFLAGS="-mmacosx-version-min=13.0" \
		go build -buildmode=c-archive -o "$build/$arch/libredrafter.a" ./cmd/libredrafter)
done
lipo -create "$build/arm64/libredrafter.a" "$build/amd64/libredrafter.a" -output "$build/libredrafter.a"
lipo -info "$build/libredrafter.a"

cp "$repo/cmd/libredrafter/redrafter.h" "$build/include/"
cat > "$build/include/module.modulemap" <<'MAP'
module CRedrafter {
    header "redrafter.h"
    export *
}
MAP
xcodebuild -create-xcframework -library "$build/libredrafter.a" -headers "$build/include" \
	-output "$here/CRedrafter.xcframework"
echo "built $here/CRedrafter.xcframework"
