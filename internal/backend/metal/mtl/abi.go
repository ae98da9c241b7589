package mtl

import "unsafe"

// How objc_msgSend's arguments reach the callee, for the hot path of
// encoding (setComputePipelineState, setBuffer, setBytes, dispatch,
// memoryBarrier): each is one purego.SyscallN with a fixed argument list,
// without reflection and without allocating. This file holds the one part
// of it that is more than passing integers, the two MTLSize structs of
// dispatchThreadgroups:threadsPerThreadgroup:, written as plain logic so
// that it is tested on any OS (abi_test.go).
//
// objc_msgSend is called with the method's own C prototype,
// void (id, SEL, MTLSize, MTLSize), where MTLSize is three NSUInteger
// (uint64 on both 64-bit targets), 24 bytes:
//
//   - arm64 (AAPCS64, which Apple's arm64 ABI keeps for non-variadic
//     calls): a composite type larger than 16 bytes that is not a
//     homogeneous floating-point aggregate is copied to memory the caller
//     allocates and passed as a pointer to that copy, in the next integer
//     register: x0 self, x1 _cmd, x2 &grid, x3 &group. The callee may
//     write the copy, so it is a scratch copy, not the caller's value.
//   - amd64 (System V): an aggregate larger than 16 bytes has class
//     MEMORY and is passed on the stack, its eightbytes in memory order, in
//     argument order; it takes no integer register. self and _cmd take rdi
//     and rsi; rdx, rcx, r8 and r9 stay unused; the six eightbytes of grid
//     then group are the first six stack slots. purego.SyscallN puts its
//     first six arguments in those registers and the rest on the stack in
//     order, so the four unused registers are passed as zeros.
//
// purego's own struct support (RegisterFunc) does the same, through
// reflection and a heap copy per call (struct_arm64.go placeStack,
// struct_amd64.go placeStack in github.com/ebitengine/purego v0.11).

// msgArgs is one encoder's scratch memory for objc_msgSend's arguments:
// the argument words handed to purego.SyscallN, and the two MTLSize copies
// that arm64 passes by reference. purego.SyscallN is variadic and marked
// //go:uintptrescapes, so a fresh argument list (a literal list, or a slice
// of a local array) escapes to the heap, one allocation per call; a slice
// of memory already on the heap does not allocate. The scratch is
// allocated once with its encoder and used by one goroutine at a time, as
// Metal encoders are; being on the heap, it does not move while C reads it.
type msgArgs struct {
	w     [maxWords]uintptr
	sizes struct{ grid, group Size }
	// pin holds the Go memory a word points to (setBytes' data) until the
	// call returns: storing it here makes that memory escape to the heap,
	// where it does not move, and keeps it alive.
	pin unsafe.Pointer
}

// maxWords is the length of the longest argument list, amd64's dispatch:
// self, _cmd, four unused registers, six stack eightbytes.
const maxWords = 12

// words stores the arguments in the scratch and returns them as a slice of
// it, for purego.SyscallN(fn, a.words(...)...).
func (a *msgArgs) words(args ...uintptr) []uintptr {
	n := copy(a.w[:], args)
	return a.w[:n]
}

// dispatch returns the objc_msgSend arguments for
// dispatchThreadgroups:threadsPerThreadgroup: on goarch, as a slice of the
// scratch, storing grid and group in the scratch where the ABI passes them
// by reference. It returns nil for an architecture it does not know.
//
// On arm64 two of the words are addresses of the scratch's fields: the
// caller keeps the scratch alive across the call (runtime.KeepAlive), and
// heap objects do not move, so the addresses stay valid as uintptrs.
func (a *msgArgs) dispatch(goarch string, self, sel uintptr, grid, group Size) []uintptr {
	a.w[0], a.w[1] = self, sel
	switch goarch {
	case "arm64":
		a.sizes.grid, a.sizes.group = grid, group
		a.w[2] = uintptr(unsafe.Pointer(&a.sizes.grid))
		a.w[3] = uintptr(unsafe.Pointer(&a.sizes.group))
		return a.w[:4]
	case "amd64":
		// w[2:6] are rdx, rcx, r8, r9: unused.
		a.w[2], a.w[3], a.w[4], a.w[5] = 0, 0, 0, 0
		a.w[6], a.w[7], a.w[8] = uintptr(grid.Width), uintptr(grid.Height), uintptr(grid.Depth)
		a.w[9], a.w[10], a.w[11] = uintptr(group.Width), uintptr(group.Height), uintptr(group.Depth)
		return a.w[:12]
	}
	return nil
}
