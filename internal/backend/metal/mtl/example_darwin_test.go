//go:build darwin

package mtl_test

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/seed9b8f47b1/redrafter/internal/backend/metal/mtl"
)

// Example compiles a kernel, runs it over a buffer and reads the result
// back. It needs a Mac with Metal, so it has no Output comment and only
// compiles elsewhere.
func Example() {
	const src = `
#include <metal_stdlib>
using namespace metal;
kernel void add_one(device float *x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] += 1.0f; }
`
	err := mtl.Do(func() error {
		dev, err := mtl.CreateSystemDefaultDevice()
		if err != nil {
			return err
		}
		defer dev.Release()
		q, err := dev.NewCommandQueue()
		if err != nil {
			return err
		}
		defer q.Release()
		lib, err := dev.NewLibraryWithSource(src, mtl.LanguageVersion2_4, false)
		if err != nil {
			return err
		}
		defer lib.Release()
		fn, err := lib.NewFunctionWithName("add_one")
		if err != nil {
			return err
		}
		defer fn.Release()
		pipe, err := dev.NewComputePipelineStateWithFunction(fn)
		if err != nil {
			return err
		}
		defer pipe.Release()
		buf, err := dev.NewBufferWithLength(4*64, mtl.ResourceStorageModeShared)
		if err != nil {
			return err
		}
		defer buf.Release()
		cb, err := q.CommandBufferWithUnretainedReferences()
		if err != nil {
			return err
		}
		enc, err := cb.ComputeCommandEncoderWithDispatchType(mtl.DispatchTypeConcurrent)
		if err != nil {
			return err
		}
		enc.SetComputePipelineState(pipe)
		enc.SetBufferOffsetAtIndex(buf, 0, 0)
		enc.DispatchThreadgroups(mtl.Size{Width: 2, Height: 1, Depth: 1}, mtl.Size{Width: 32, Height: 1, Depth: 1})
		enc.EndEncoding()
		cb.Commit()
		cb.WaitUntilCompleted()
		if err := cb.Error(); err != nil {
			return err
		}
		x := buf.Contents()
		fmt.Println(dev.Name(), math.Float32frombits(binary.LittleEndian.Uint32(x[4*63:])))
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
}
