//go:build darwin

package mtl

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

// TestEncodingDoesNotAllocate checks on a Mac that the calls made for every
// dispatch (pipeline, buffers, bytes, threadgroup memory, the dispatch and
// the barrier) neither allocate nor reflect: the binding's hot path.
func TestEncodingDoesNotAllocate(t *testing.T) {
	const src = `
#include <metal_stdlib>
using namespace metal;
struct P { float add; };
kernel void add(device float *x [[buffer(0)]], constant P &p [[buffer(1)]],
		threadgroup float *sh [[threadgroup(0)]], uint i [[thread_position_in_grid]],
		uint t [[thread_index_in_threadgroup]]) {
	sh[t] = x[i];
	threadgroup_barrier(mem_flags::mem_threadgroup);
	x[i] = sh[t] + p.add;
}
`
	err := Do(func() error {
		dev, err := CreateSystemDefaultDevice()
		if err != nil {
			return err
		}
		defer dev.Release()
		q, err := dev.NewCommandQueue()
		if err != nil {
			return err
		}
		defer q.Release()
		lib, err := dev.NewLibraryWithSource(src, LanguageVersion2_4, false)
		if err != nil {
			return err
		}
		defer lib.Release()
		fn, err := lib.NewFunctionWithName("add")
		if err != nil {
			return err
		}
		defer fn.Release()
		pipe, err := dev.NewComputePipelineStateWithFunction(fn)
		if err != nil {
			return err
		}
		defer pipe.Release()
		buf, err := dev.NewBufferWithLength(4*64, ResourceStorageModeShared)
		if err != nil {
			return err
		}
		defer buf.Release()
		cb, err := q.CommandBufferWithUnretainedReferences()
		if err != nil {
			return err
		}
		enc, err := cb.ComputeCommandEncoderWithDispatchType(DispatchTypeConcurrent)
		if err != nil {
			return err
		}
		one := []byte{0, 0, 0x80, 0x3f} // 1.0f
		const runs = 100
		allocs := testing.AllocsPerRun(runs, func() {
			enc.SetComputePipelineState(pipe)
			enc.SetBufferOffsetAtIndex(buf, 0, 0)
			enc.SetBytesLengthAtIndex(one, 1)
			enc.SetThreadgroupMemoryLengthAtIndex(4*32, 0)
			enc.DispatchThreadgroups(Size{2, 1, 1}, Size{32, 1, 1})
			enc.MemoryBarrierWithScope(BarrierScopeBuffers)
		})
		enc.EndEncoding()
		cb.Commit()
		cb.WaitUntilCompleted()
		if err := cb.Error(); err != nil {
			return err
		}
		if allocs != 0 {
			t.Errorf("%v allocations per dispatch, want 0", allocs)
		}
		// AllocsPerRun runs the function once more than runs, to warm up.
		x := buf.Contents()
		if got, want := math.Float32frombits(binary.LittleEndian.Uint32(x)), float32(runs+1); got != want {
			t.Errorf("x[0] = %v after the dispatches, want %v", got, want)
		}
		return nil
	})
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
}
