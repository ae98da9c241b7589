// Package mtl is a thin binding of the Metal compute API for the metal
// backend, over purego and its objc package: no cgo, so the darwin code is
// compiled, vetted and test-compiled from Linux. Go names follow the
// Objective-C selectors; each wrapper links the Apple reference it mirrors.
// Only darwin has Metal: elsewhere every entry point returns ErrUnavailable.
//
// The encoder's per-dispatch calls (SetComputePipelineState,
// SetBufferOffsetAtIndex, SetBytesLengthAtIndex,
// SetThreadgroupMemoryLengthAtIndex, DispatchThreadgroups,
// MemoryBarrierWithScope) neither allocate nor reflect: abi.go explains how
// their arguments, the MTLSize structs included, are passed.
//
// Objects returned by new*/copy* selectors are owned by the caller and
// freed with Release. Autoreleased objects (command buffers, encoders,
// strings) live until the enclosing autorelease pool is drained: call the
// binding inside Do, which locks the OS thread and wraps f in a pool.
//
// Unsafe contract: a Buffer made with NewBufferWithBytesNoCopy aliases host
// memory that must be page-aligned, stay mapped and stay unmodified by the
// CPU while the GPU may read it, until the Buffer is released.
package mtl

import "errors"

// ErrUnavailable is returned on systems without Metal.
var ErrUnavailable = errors.New("metal: Metal is not available on this system")

// Size is MTLSize.
type Size struct{ Width, Height, Depth uint }

// Resource options (MTLResourceOptions).
const (
	ResourceStorageModeShared           = 0
	ResourceHazardTrackingModeUntracked = 1 << 8
)

// Dispatch types, barrier scopes and command buffer statuses.
const (
	DispatchTypeSerial           = 0
	DispatchTypeConcurrent       = 1
	BarrierScopeBuffers          = 1
	CommandBufferStatusCompleted = 4
	CommandBufferStatusError     = 5
)

// GPU families (MTLGPUFamily).
const (
	GPUFamilyApple1 = 1001
	GPUFamilyApple9 = 1009
	GPUFamilyMac2   = 2002
)

// Compile options: MTLLanguageVersion is major<<16 | minor; MTLMathMode and
// MTLMathFloatingPointFunctions (macOS 15) replace fastMathEnabled.
const (
	LanguageVersion2_4 = 2<<16 | 4
	LanguageVersion3_0 = 3<<16 | 0

	MathModeSafe    = 0
	MathModeRelaxed = 1
	MathModeFast    = 2

	MathFloatingPointFunctionsFast    = 0
	MathFloatingPointFunctionsPrecise = 1
)
