package metal

import (
	"math/bits"
	"sync"
)

// pool keeps freed buffers by size class for reuse: allocating Metal buffers
// is slow, and plans of the same shapes ask for the same sizes again. Sizes
// round up to a power of two (at least 256 bytes) below 1 MiB and to whole
// MiB above; at most poolKeep bytes stay pooled.
type pool struct {
	dev device

	mu   sync.Mutex
	free map[int][]*Buffer
	kept int
}

const poolKeep = 256 << 20

func newPool(dev device) *pool { return &pool{dev: dev, free: map[int][]*Buffer{}} }

func sizeClass(n int) int {
	switch {
	case n <= 256:
		return 256
	case n <= 1<<20:
		return 1 << bits.Len(uint(n-1))
	default:
		return (n + 1<<20 - 1) &^ (1<<20 - 1)
	}
}

func (p *pool) get(size int) (*Buffer, error) {
	c := sizeClass(size)
	p.mu.Lock()
	if l := p.free[c]; len(l) > 0 {
		x := l[len(l)-1]
		p.free[c] = l[:len(l)-1]
		p.kept -= c
		p.mu.Unlock()
		clear(x.dev.contents()[:c])
		return &Buffer{dev: x.dev, size: size, class: c}, nil
	}
	p.mu.Unlock()
	db, err := p.dev.newBuffer(c)
	if err != nil {
		return nil, err
	}
	return &Buffer{dev: db, size: size, class: c}, nil
}

// put takes back a freed buffer. The Buffer value itself stays freed (a
// later use of it is reported); the pool keeps the device memory.
func (p *pool) put(x *Buffer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kept+x.class > poolKeep {
		x.dev.release()
		return
	}
	p.free[x.class] = append(p.free[x.class], &Buffer{dev: x.dev, size: x.class, class: x.class})
	p.kept += x.class
}

func (p *pool) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, l := range p.free {
		for _, x := range l {
			x.dev.release()
		}
		delete(p.free, c)
	}
	p.kept = 0
}
