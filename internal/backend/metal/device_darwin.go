//go:build darwin

package metal

import (
	"fmt"
	"os"
	"sync"

	"github.com/seed9b8f47b1/redrafter/internal/backend/metal/mtl"
	msl "github.com/seed9b8f47b1/redrafter/internal/backend/metal/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

func init() {
	graph.Register("metal", func() (graph.Backend, error) { return openBuilt() })
}

// mtlDevice is the real device: one MTLDevice, one command queue, a library
// per kernel file compiled from the embedded source on first use.
type mtlDevice struct {
	dev   mtl.Device
	queue mtl.CommandQueue
	inf   DeviceInfo

	mu      sync.Mutex
	libs    map[string]mtl.Library
	libErrs map[string]error // files the compiler refused, with its log
}

func openDevice() (device, error) {
	d := &mtlDevice{libs: map[string]mtl.Library{}, libErrs: map[string]error{}}
	err := mtl.Do(func() error {
		dev, err := mtl.CreateSystemDefaultDevice()
		if err != nil {
			return err
		}
		q, err := dev.NewCommandQueue()
		if err != nil {
			dev.Release()
			return err
		}
		d.dev, d.queue, d.inf = dev, q, describe(dev)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

func describe(dev mtl.Device) DeviceInfo {
	inf := DeviceInfo{
		Name:          dev.Name(),
		Architecture:  dev.ArchitectureName(),
		UnifiedMemory: dev.HasUnifiedMemory(),
		WorkingSet:    dev.RecommendedMaxWorkingSetSize(),
		MaxBuffer:     dev.MaxBufferLength(),
		Cores:         mtl.GPUCoreCount(),
	}
	for f := mtl.GPUFamilyApple9 + 1; f >= mtl.GPUFamilyApple1; f-- {
		if dev.SupportsFamily(f) {
			inf.Family = fmt.Sprintf("Apple%d", f-mtl.GPUFamilyApple1+1)
			break
		}
	}
	if inf.Family == "" && dev.SupportsFamily(mtl.GPUFamilyMac2) {
		inf.Family = "Mac2"
	}
	return inf
}

// listDevices describes every GPU.
func listDevices() ([]DeviceInfo, error) {
	var infos []DeviceInfo
	err := mtl.Do(func() error {
		ds, err := mtl.CopyAllDevices()
		if err != nil {
			return err
		}
		for _, d := range ds {
			infos = append(infos, describe(d))
			d.Release()
		}
		return nil
	})
	return infos, err
}

func (d *mtlDevice) info() DeviceInfo { return d.inf }

// pageSize is the host's page (16 KiB on Apple silicon): Metal wraps host
// memory in whole virtual-memory pages.
func (d *mtlDevice) pageSize() int { return os.Getpagesize() }

func (d *mtlDevice) do(f func() error) error { return mtl.Do(f) }

func (d *mtlDevice) close() {
	_ = mtl.Do(func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, l := range d.libs {
			l.Release()
		}
		d.libs = nil
		d.queue.Release()
		d.dev.Release()
		return nil
	})
}

type mtlBuffer struct {
	b    mtl.Buffer
	data []byte
}

func (x *mtlBuffer) contents() []byte { return x.data }
func (x *mtlBuffer) release()         { _ = mtl.Do(func() error { x.b.Release(); return nil }) }

func (d *mtlDevice) newBuffer(size int) (devBuffer, error) {
	var x *mtlBuffer
	err := mtl.Do(func() error {
		b, err := d.dev.NewBufferWithLength(size, mtl.ResourceStorageModeShared)
		if err != nil {
			return err
		}
		x = &mtlBuffer{b: b, data: b.Contents()[:size]}
		return nil
	})
	return x, err
}

func (d *mtlDevice) wrap(data []byte) (devBuffer, error) {
	var x *mtlBuffer
	err := mtl.Do(func() error {
		b, err := d.dev.NewBufferWithBytesNoCopy(data, mtl.ResourceStorageModeShared)
		if err != nil {
			return err
		}
		x = &mtlBuffer{b: b, data: data}
		return nil
	})
	return x, err
}

type mtlPipeline struct {
	p    mtl.ComputePipelineState
	nm   string
	maxT int
}

func (p *mtlPipeline) name() string    { return p.nm }
func (p *mtlPipeline) maxThreads() int { return p.maxT }
func (p *mtlPipeline) release()        { _ = mtl.Do(func() error { p.p.Release(); return nil }) }

// pipeline compiles the kernel's file (once) and builds its pipeline. The
// caller (Backend.pipeline) caches pipelines.
func (d *mtlDevice) pipeline(name string) (pipeline, error) {
	file := kernelFamily(name) + ".metal"
	var out *mtlPipeline
	err := mtl.Do(func() error {
		d.mu.Lock()
		lib, ok := d.libs[file]
		libErr := d.libErrs[file]
		d.mu.Unlock()
		if libErr != nil {
			return libErr
		}
		if !ok {
			src, err := msl.Source(file)
			if err != nil {
				return err
			}
			if lib, err = d.dev.NewLibraryWithSource(src, mtl.LanguageVersion2_4, false); err != nil {
				err = fmt.Errorf("metal: compiling internal/backend/metal/shaders/%s: %w", file, err)
				d.mu.Lock()
				d.libErrs[file] = err
				d.mu.Unlock()
				return err
			}
			d.mu.Lock()
			d.libs[file] = lib
			d.mu.Unlock()
		}
		fn, err := lib.NewFunctionWithName(name)
		if err != nil {
			return fmt.Errorf("metal: internal/backend/metal/shaders/%s: %w", file, err)
		}
		defer fn.Release()
		p, err := d.dev.NewComputePipelineStateWithFunction(fn)
		if err != nil {
			return fmt.Errorf("metal: pipeline %s: %w", name, err)
		}
		out = &mtlPipeline{p: p, nm: name, maxT: p.MaxTotalThreadsPerThreadgroup()}
		return nil
	})
	return out, err
}

type mtlCommandBuffer struct {
	cb   mtl.CommandBuffer
	enc  mtl.ComputeCommandEncoder
	last pipeline
}

// newCommandBuffer must be called inside do (the encoder is autoreleased);
// the command buffer is retained until wait.
func (d *mtlDevice) newCommandBuffer() (commandBuffer, error) {
	cb, err := d.queue.CommandBufferWithUnretainedReferences()
	if err != nil {
		return nil, err
	}
	cb.Retain()
	enc, err := cb.ComputeCommandEncoderWithDispatchType(mtl.DispatchTypeConcurrent)
	if err != nil {
		cb.Release()
		return nil, err
	}
	return &mtlCommandBuffer{cb: cb, enc: enc}, nil
}

func (c *mtlCommandBuffer) dispatch(d *dispatch) {
	if d.pipe != c.last {
		c.enc.SetComputePipelineState(d.pipe.(*mtlPipeline).p)
		c.last = d.pipe
	}
	for _, b := range d.binds {
		if b.bytes != nil {
			c.enc.SetBytesLengthAtIndex(b.bytes, b.index)
		} else {
			c.enc.SetBufferOffsetAtIndex(b.buf.dev.(*mtlBuffer).b, b.buf.base+b.off, b.index)
		}
	}
	for i, n := range d.shared {
		c.enc.SetThreadgroupMemoryLengthAtIndex(n, i)
	}
	size := func(v [3]int) mtl.Size { return mtl.Size{Width: uint(v[0]), Height: uint(v[1]), Depth: uint(v[2])} }
	c.enc.DispatchThreadgroups(size(d.grid), size(d.group))
}

func (c *mtlCommandBuffer) barrier() { c.enc.MemoryBarrierWithScope(mtl.BarrierScopeBuffers) }

func (c *mtlCommandBuffer) commit() {
	c.enc.EndEncoding()
	c.cb.Commit()
}

func (c *mtlCommandBuffer) wait() error {
	return mtl.Do(func() error {
		defer c.cb.Release()
		c.cb.WaitUntilCompleted()
		if c.cb.Status() == mtl.CommandBufferStatusError {
			if err := c.cb.Error(); err != nil {
				return err
			}
			return fmt.Errorf("command buffer failed")
		}
		return nil
	})
}
