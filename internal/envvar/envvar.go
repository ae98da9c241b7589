// Package envvar declares every environment variable redrafter reads, and
// reads them: the CLI, the backends and the Metal test tooling go through
// the variables declared here instead of calling os.Getenv, so this file is
// the complete list (a test of this package checks that no other non-test
// file of the module reads the environment).
//
// The runtime:
//
//	REDRAFTER_BACKEND                the CLI's --backend when the flag is not given: auto, cpu,
//	                                 metal or cuda (default auto)
//	REDRAFTER_CPU_TILES              off: the CPU backend does not repack 4/8-bit weights for its
//	                                 tile kernel; any other value, or unset: it does
//	REDRAFTER_FUSED_LAYERS           off: models build unfused layers (17 ops) on GPU backends too,
//	                                 for comparison; any other value, or unset: fused (6 ops)
//	REDRAFTER_METAL_FIRST_COMMIT     dispatches in the first Metal command buffer (default 10)
//	REDRAFTER_METAL_OPS_PER_BUFFER   dispatches per later command buffer (default 40; 20 on
//	                                 phones, 50 on Pro, Max and Ultra)
//	REDRAFTER_METAL_MB_PER_BUFFER    MiB of distinct bound ranges per command buffer (default
//	                                 0: no limit)
//	REDRAFTER_METAL_MATVEC_MAX_ROWS  the largest batch the Metal matvec kernel runs (default 16)
//	REDRAFTER_CUDA_GRAPHS            off: the CUDA backend runs every plan as a list of launches;
//	                                 any other value, or unset: from a plan's second run, as one
//	                                 CUDA graph
//	REDRAFTER_CUDA_QMV1_COLS         the columns a set of the CUDA one-row 4/8-bit products has: 8
//	                                 (default), 4 or 2 for every launch, for comparison; auto:
//	                                 chosen per launch from its grid and the GPU's SMs
//	REDRAFTER_CUDA_VERIFY_GROUPS     auto, 1, 2, 4 or 8: the column groups a block of the CUDA
//	                                 8-row (verification) kernels takes (default 1)
//	REDRAFTER_API_KEY                redrafter serve's --api-key when the flag is not given
//
// Hugging Face's own variables, read by the CLI for pull, list, rm and model
// names (as huggingface_hub reads them, so both share one cache and login):
//
//	HF_HUB_CACHE                     the hub cache directory (default $HF_HOME/hub)
//	HF_HOME                          Hugging Face's directory (default $XDG_CACHE_HOME/huggingface)
//	XDG_CACHE_HOME                   where HF_HOME is when unset (default ~/.cache)
//	HF_ENDPOINT                      the hub's address, for a mirror (default https://huggingface.co)
//	HF_TOKEN                         the token for gated and private repositories (never logged)
//	HF_HUB_OFFLINE                   1 (or true, yes, on): use the cache only, never the network
//
// The Metal kernel emulator (internal/backend/metal/emu), which only tests use:
//
//	REDRAFTER_CLANGXX                the clang++ (16 or newer) that compiles kernels as C++
//	REDRAFTER_EMU_CACHE              a directory that keeps compiled kernels between test runs
//	CI                               set: tests that need clang++ fail without one, not skip
//
// The tests (read through package internal/testenv; nothing that ships
// reads them):
//
//	REDRAFTER_TEST_FULL              set: the emulated W × L × dtype matrices run whole (make
//	                                 test-all); unset: a representative subset (make test)
//	REDRAFTER_SEED                   replays the random inputs of a test (each logs its seed)
//
// Read by test files directly, where they are used (nothing that ships
// reads them):
//
//	REDRAFTER_BENCH_MODEL            the model file of the root package's decode benchmarks
//	REDRAFTER_BENCH_TOKENS           new tokens per pass of BenchmarkForwardPass (default 17)
//
// An empty variable counts as unset. Each variable's doc comment below says
// when it is read.
package envvar

import (
	"fmt"
	"os"
	"strconv"
)

// Text is a variable whose value is used as it is (a name, a path).
type Text string

// Switch is a variable that turns something off when its value is "off"
// (exactly; any other value, or none, leaves it on).
type Switch string

// Count is a variable holding a non-negative decimal integer.
type Count string

// Name returns the variable's name.
func (v Text) Name() string { return string(v) }

// Get returns the variable's value ("" when unset).
func (v Text) Get() string { return os.Getenv(string(v)) }

// Or returns the variable's value, or def when it is unset or empty.
func (v Text) Or(def string) string {
	if s := v.Get(); s != "" {
		return s
	}
	return def
}

// Name returns the variable's name.
func (v Switch) Name() string { return string(v) }

// Off reports whether the variable is "off".
func (v Switch) Off() bool { return os.Getenv(string(v)) == "off" }

// Name returns the variable's name.
func (v Count) Name() string { return string(v) }

// Get returns the variable's value; set is false when it is unset or empty
// (n is then 0 and the caller keeps its default). A value that is not a
// non-negative integer (as strconv.Atoi reads it) is an error naming the
// variable and the value.
func (v Count) Get() (n int, set bool, err error) {
	s := os.Getenv(string(v))
	if s == "" {
		return 0, false, nil
	}
	n, err = strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("%s=%q: want a non-negative integer", string(v), s)
	}
	return n, true, nil
}

// Backend, REDRAFTER_BACKEND, is the default of the CLI's --backend flag,
// read when the command line is parsed: auto (the default: the first of
// metal, cuda and cpu that opens), cpu, metal or cuda. The flag, when given,
// wins. The value is checked where the backend is opened, as the flag's is.
const Backend Text = "REDRAFTER_BACKEND"

// APIKey, REDRAFTER_API_KEY, is the default of redrafter serve's --api-key,
// read when the command line is parsed: the key clients must send as
// "Authorization: Bearer KEY". The environment keeps the key out of the
// process list, where a flag would show it. The flag, when given, wins.
const APIKey Text = "REDRAFTER_API_KEY"

// CPUTiles, REDRAFTER_CPU_TILES, is read once, when the CPU backend's
// package is initialised. "off" turns off the repacking of 4- and 8-bit
// weights for the tile kernel on CPUs that have it (AVX-512 VNNI): every
// product then runs the row kernels. Any other value, or none, leaves
// repacking on (the default).
const CPUTiles Switch = "REDRAFTER_CPU_TILES"

// FusedLayers, REDRAFTER_FUSED_LAYERS, is read when a model is bound to a
// backend: off keeps a GPU backend on the unfused layer graph.
const FusedLayers Switch = "REDRAFTER_FUSED_LAYERS"

// CUDAGraphs, REDRAFTER_CUDA_GRAPHS, is read each time a CUDA backend is
// opened. "off" makes it run every plan as a list of launches, queued one
// by one at each run, for comparison with (or in case of trouble with) the
// default: from a plan's second run, one launch of a CUDA graph of its
// kernels.
const CUDAGraphs Switch = "REDRAFTER_CUDA_GRAPHS"

// CUDAQMV1Cols, REDRAFTER_CUDA_QMV1_COLS, is read each time a CUDA backend
// is opened: the columns a set of the one-row (decoding) 4- and 8-bit
// matrix products' blocks has, 8, 4 or 2 for every such launch (every
// choice gives the same bits), for comparing them on a GPU; unset is 8,
// the width measured on a GPU. auto: chosen per launch from its grid and
// the GPU's SMs (unmeasured). Any other value makes opening the backend
// fail.
const CUDAQMV1Cols Text = "REDRAFTER_CUDA_QMV1_COLS"

// CUDAVerifyGroups, REDRAFTER_CUDA_VERIFY_GROUPS, is read each time a CUDA
// backend is opened: how many column groups a block of the 8-row matrix
// kernels (verification passes of 5 to 16 rows) computes, each reading x
// once from L2 for all of them. auto: chosen per product from its columns
// and the GPU's multiprocessors (unmeasured); 1, 2, 4 or 8: that many, for
// comparison; unset is 1, the kernels measured on a GPU. Any other value
// makes opening the backend fail.
const CUDAVerifyGroups Text = "REDRAFTER_CUDA_VERIFY_GROUPS"

// The Metal backend's command-buffer policy, read each time a Metal backend
// is opened (metal.Policy.WithEnv); each overrides the default of the
// device's class. A value that is not a non-negative integer makes opening
// the backend fail.
const (
	// MetalFirstCommit, REDRAFTER_METAL_FIRST_COMMIT, is the number of
	// dispatches in the first command buffer of a plan, committed early so
	// the GPU starts. Default 10; 0 counts as 1.
	MetalFirstCommit Count = "REDRAFTER_METAL_FIRST_COMMIT"
	// MetalOpsPerBuffer, REDRAFTER_METAL_OPS_PER_BUFFER, is the number of
	// dispatches per later command buffer. Default 40 (20 on phones, 50 on
	// Pro, Max and Ultra chips); 0 counts as 1.
	MetalOpsPerBuffer Count = "REDRAFTER_METAL_OPS_PER_BUFFER"
	// MetalMBPerBuffer, REDRAFTER_METAL_MB_PER_BUFFER, is the MiB of
	// distinct bound ranges after which a command buffer is committed.
	// Default 0: no limit.
	MetalMBPerBuffer Count = "REDRAFTER_METAL_MB_PER_BUFFER"
	// MetalMatvecMaxRows, REDRAFTER_METAL_MATVEC_MAX_ROWS, is the largest
	// batch a matrix product runs with the matvec kernel; larger ones use
	// simdgroup matrices, which sum in another order, so a verification
	// tree larger than this no longer reproduces greedy decoding bit for
	// bit. Default 16, which covers the largest recommended beam's tree
	// (W=3, L=5: 13 tokens).
	MetalMatvecMaxRows Count = "REDRAFTER_METAL_MATVEC_MAX_ROWS"
)

// Hugging Face's variables, read by the CLI when a command pulls, lists or
// removes models or is given a repository name for --model or --drafter.
const (
	// HFHubCache, HF_HUB_CACHE, is the hub cache directory shared with
	// huggingface_hub, transformers and mlx-lm. Unset: $HF_HOME/hub.
	HFHubCache Text = "HF_HUB_CACHE"
	// HFHome, HF_HOME, is Hugging Face's directory. Unset:
	// $XDG_CACHE_HOME/huggingface.
	HFHome Text = "HF_HOME"
	// XDGCacheHome, XDG_CACHE_HOME, is the user's cache directory, where
	// HF_HOME is when unset. Unset: ~/.cache.
	XDGCacheHome Text = "XDG_CACHE_HOME"
	// HFEndpoint, HF_ENDPOINT, is the hub's address, for a mirror. Unset:
	// https://huggingface.co.
	HFEndpoint Text = "HF_ENDPOINT"
	// HFToken, HF_TOKEN, is the access token sent to the endpoint (never to
	// the content host files redirect to, never logged), for gated and
	// private repositories.
	HFToken Text = "HF_TOKEN"
	// HFHubOffline, HF_HUB_OFFLINE, set to 1 (or true, yes, on, in any
	// case), keeps every command off the network: model names resolve from
	// the cache only, and an error names what is missing.
	HFHubOffline Text = "HF_HUB_OFFLINE"
)

// The Metal kernel emulator's variables. Only tests run the emulator (it
// compiles .metal files as C++ on machines without a Mac), but it is a
// package like the others, so its variables are declared here too.
const (
	// ClangXX, REDRAFTER_CLANGXX, names the C++ compiler (a name on PATH or
	// a path; clang++ 16 or newer), read once, at the first compile. Unset:
	// the first of clang++, clang++-21, ..., clang++-16 on PATH that is 16
	// or newer.
	ClangXX Text = "REDRAFTER_CLANGXX"
	// EmuCache, REDRAFTER_EMU_CACHE, is a directory (created if missing)
	// where the tests' compiled kernels are kept between runs, keyed by
	// their content. Unset: a temporary directory, removed when the tests
	// end.
	EmuCache Text = "REDRAFTER_EMU_CACHE"
	// CI, set by CI services (any non-empty value), makes the tests that
	// need the emulator fail when no compiler is found, instead of
	// skipping.
	CI Text = "CI"
)

// The tests' variables, read by package internal/testenv.
const (
	// TestFull, REDRAFTER_TEST_FULL, read by tests that run a matrix of
	// emulated generations (beam shapes × dtypes × KV caches): set (any
	// non-empty value, as make test-all sets it), they run the whole
	// matrix; unset, a representative subset that keeps make test within
	// its time.
	TestFull Text = "REDRAFTER_TEST_FULL"
	// Seed, REDRAFTER_SEED, is the seed of a test's random inputs, read by
	// testenv.Seed: a test logs the seed it drew, and setting this replays
	// it. The kernel emulators' random thread order takes it too
	// (internal/backend/emu.DefaultOrders).
	Seed Text = "REDRAFTER_SEED"
)
