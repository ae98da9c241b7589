# redrafter: the two commands that matter are `make demo` and `make test`.
GO      ?= go
BIN     := bin/redrafter
MODEL   := models/stories260K/stories260K.gguf
PKGS    := ./...

# The emulated GPU tests' compiled kernels, kept by content hash and shared
# by the test processes of one run and of later runs (clang's -O1 builds
# were about half of the CUDA packages' CPU time: TestKernels 134 s cold,
# 64 s warm). internal/backend/emu writes it safely from parallel
# processes; delete .cache/emu to empty it.
export REDRAFTER_EMU_CACHE ?= $(CURDIR)/.cache/emu

.PHONY: build demo demo-speedup test test-go test-side test-all test-full test-short test-clients cuda-tag deps lint check check-tidy check-generate cross bench fuzz clean lib test-lib

build:
	$(GO) build -o $(BIN) ./cmd/redrafter

# Build, then generate on the bundled demo model: autoregressive decoding,
# then ReDrafter with the bundled draft head (same text; stats on stderr).
DRAFTER := models/stories260K/drafter
demo: build
	@echo "== autoregressive"
	$(BIN) generate --model $(MODEL) --prompt "Once upon a time" --max-tokens 256 --stats
	@echo "== ReDrafter: draft head $(DRAFTER), 1 beam of 5 tokens (the CPU default)"
	$(BIN) generate --model $(MODEL) --prompt "Once upon a time" --max-tokens 256 --stats \
		--drafter $(DRAFTER) --beam-width 1 --beam-length 5

# The demo model is too small for speculation to pay (a pass over 5 tokens
# costs ~3 single steps). This pads it, and its head, to TinyLlama-1.1B's
# shape (same outputs, real cost; 1.9 GB in .cache/), then measures
# autoregressive decoding against ReDrafter at the CPU default beam.
INFLATED := .cache/tinyllama-shaped-f16.gguf
demo-speedup: build
	@mkdir -p .cache
	@test -f $(INFLATED) || $(BIN) dev inflate --model $(MODEL) --drafter $(DRAFTER) --out $(INFLATED)
	$(BIN) bench --model $(INFLATED) --drafter $(INFLATED:.gguf=-drafter) \
		--prompts models/stories260K/distill/prompts-heldout.txt --limit 2 --max-tokens 48 \
		--beam-width 1 --beam-length 5

# libredrafter, the C library for apps (cmd/libredrafter, docs/EMBEDDING.md),
# for the host: shared and static, with its header beside them. (Go also
# writes a libredrafter.h of its own next to each; redrafter.h is the API.)
LIBDIR := bin/lib
lib:
	@mkdir -p $(LIBDIR)
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -o $(LIBDIR)/libredrafter.so ./cmd/libredrafter
	CGO_ENABLED=1 $(GO) build -buildmode=c-archive -o $(LIBDIR)/libredrafter.a ./cmd/libredrafter
	rm -f $(LIBDIR)/libredrafter.h
	cp cmd/libredrafter/redrafter.h $(LIBDIR)/

# The C library's test alone: tests/c/redrafter_test.c against the .so, the
# .a and under AddressSanitizer (`make test` runs it with every test).
test-lib:
	CGO_ENABLED=1 $(GO) test -count=1 -run '^TestCLibrary$$' -v ./tests

# Install what the tests need (see scripts/deps.sh), then run every test
# (TestCLibrary among them: libredrafter built shared and static, its C
# test run against both and under AddressSanitizer), the pure-Go (noasm)
# kernels too, concurrent Sessions of one Engine and of a Group, and the
# server's tests (concurrent clients, queue, cancels, shutdown: seconds), under
# the race detector (which needs cgo and a C compiler), the darwin cross-build checks, and
# the repository checks (go.mod tidy, generated assembly up to date).
# The emulated GPU generations run a representative subset of their
# W × L × dtype matrices here; `make test-all` runs them whole.
# TEST_TIMEOUT bounds each test binary, sized for a machine loaded 4 times
# over (Go's default, 10 minutes, is not).
#
# The packages' tests (test-go) and the rest (test-side) run side by side:
# go test ./... leaves a core idle for much of its run (its longest
# packages run their emulated kernels one process at a time, at its end
# alone), and the race, client and cross-build stages fill it. Their lines
# interleave as they come (make's --output-sync would hold go test's until
# it ends).
TEST_TIMEOUT ?= 30m
test: deps
	@$(MAKE) --no-print-directory -j2 test-go test-side

test-go:
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

test-side:
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -run '^(TestConcurrent.*|TestGroup.*)$$' .
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./internal/server
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -tags noasm ./internal/backend/cpu/...
	$(MAKE) --no-print-directory test-clients
	$(MAKE) --no-print-directory cuda-tag
	$(MAKE) --no-print-directory cross
	$(MAKE) --no-print-directory check

# Everything `make test` runs, then the emulated matrices whole (every beam
# shape, head and KV type: REDRAFTER_TEST_FULL) in the packages whose
# tests pick a subset by default. .ci/run runs this.
test-all: test test-full

FULL_TIMEOUT ?= 90m
test-full:
	REDRAFTER_TEST_FULL=1 $(GO) test -count=1 -timeout $(FULL_TIMEOUT) \
		$$(grep -rl --include='*_test.go' 'testenv\.\(Subset\|Full\)' . | xargs -n1 dirname | sort -u)
	# The inference extension's own metrics scraper against serve: its
	# module graph (Kubernetes' client libraries) costs ~3.5 minutes to
	# compile on 2 cores from a cold cache, too much for make test.
	cd tests/deploy && $(GO) test -count=1 -timeout $(FULL_TIMEOUT) ./picker
	$(MAKE) --no-print-directory cross CROSS_ARCHS=amd64

# The official OpenAI clients against `redrafter serve` on loopback: the Go
# one (tests/openai-go, a module of its own, which `go test ./...` above
# skips) and the Node one (tests/node, installed by scripts/deps.sh); then
# what docs/DEPLOY.md deploys (tests/deploy, a module of its own for the
# Kubernetes modules): the manifests decoded strictly into the upstream
# types, the inference extension's metrics scraper against the server, and
# the container image built and run from scratch (skips without buildah).
test-clients:
	cd tests/openai-go && $(GO) test -count=1 ./...
	cd tests/node && node --test
	cd tests/deploy && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) .

deps:
	@bash scripts/deps.sh

lint: check-tidy
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet $(PKGS)

# What must match what a tool would write: go.mod/go.sum (go mod tidy) and
# the amd64 assembly of internal/backend/cpu/kernels (its generators).
check: check-tidy check-generate

check-tidy:
	@$(GO) mod tidy -diff >/dev/null || { $(GO) mod tidy -diff; echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }

check-generate:
	@GO=$(GO) bash scripts/check-generate.sh

# The build with the CUDA driver binding (tag cuda; docs/CUDA.md): vet and
# build everything with it, and run the tests only that build has (the
# real libcuda.so.1 loaded, "no device" as a clear error, auto falling back
# to the CPU); the rest of backend/cuda ran untagged above.
cuda-tag:
	$(GO) vet -tags cuda $(PKGS)
	$(GO) build -tags cuda $(PKGS)
	$(GO) test -count=1 -tags cuda -run '^(TestRealDriverWithoutGPU|TestLoadMissingLibrary|TestOpenWithoutGPU|TestAutoFallsBackToCPU)$$' ./internal/backend/cuda/...

# Type-check, build and link the tests of every package for macOS (the
# Metal target) from any machine, without cgo: the test binaries are built
# together and "run" by true(1). make test checks darwin/arm64 (Apple
# silicon), make test-all darwin/amd64 too.
CROSS_ARCHS ?= arm64
cross:
	@for arch in $(CROSS_ARCHS); do \
		echo "darwin/$$arch: vet, build, link every test binary"; \
		CGO_ENABLED=0 GOOS=darwin GOARCH=$$arch $(GO) vet $(PKGS) || exit 1; \
		CGO_ENABLED=0 GOOS=darwin GOARCH=$$arch $(GO) build $(PKGS) || exit 1; \
		out=$$(CGO_ENABLED=0 GOOS=darwin GOARCH=$$arch $(GO) test -count=1 -vet=off -exec true $(PKGS) 2>&1) || { echo "$$out"; exit 1; }; \
	done

bench:
	$(GO) test -run '^$$' -bench . -count 10 ./internal/backend/cpu/... . | tee bench.txt

# Run every fuzz target (found by name, so a new one is never left out) for
# FUZZTIME each; their seed corpora run in `make test`. FUZZ picks targets
# by a regular expression on their names: `make fuzz FUZZ=POSTRoutes` is the
# server's (any 5xx or invalid JSON from the four POST routes fails).
FUZZTIME ?= 60s
FUZZ ?= .
fuzz:
	@set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' .); do \
		pkg=$$(dirname $$f); \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f | grep -E -e '$(FUZZ)'); do \
			echo "fuzz $$t ($$pkg, $(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

clean:
	rm -rf bin bench.txt
