package cuda

import (
	"fmt"
	"sync"
)

// staging holds small writes (a plan's inputs: token ids, positions, the
// KV length, tree ends) in host memory the device copies from directly
// (pinned, on the real driver) until the next Run, which queues them as
// asynchronous copies ahead of its kernels. A decode step then costs no
// synchronous pageable copy per input: its inputs reach the device in the
// same stream submission as its kernels, and writes to adjacent device
// memory in the order they lie there go as one copy.
//
// A plan's inputs live in one buffer (graph.InputBlocker), with a host
// copy: a Write sets the host copy, and the next Run stages the span
// written since the last one, unwritten inputs between included (their
// host copy is what the device holds), so a step's inputs go in one copy
// whatever order they were written in.
//
// A Read first copies what is staged and waits, so it sees every write
// before it, as a synchronous copy would have.
type staging struct {
	mu     sync.Mutex
	buf    []byte // from driver.hostAlloc
	n      int    // bytes of buf staged
	copies []stagedCopy
	blocks []*Buffer // input blocks written since the last Run
}

// stagedCopy is n bytes of the staging buffer at off, for device address
// dst in the allocation at base.
type stagedCopy struct {
	base   devptr
	dst    devptr
	off, n int
	writes int // the Writes it merges
}

// maxStagedWrite is the largest write that is staged; a larger one (a
// buffer filled once, not a per-token input) copies synchronously after
// what is staged, so the staging memory stays small.
const maxStagedWrite = 1 << 20

// minStaging is the staging memory's first size: every input of a decode
// or ReDrafter plan at once, with room to spare.
const minStaging = 64 << 10

// write stages src for device address dst, in the allocation at base.
// Writes merge into one copy only within one allocation, so that freeing
// one (drop) never leaves a copy running into it.
func (s *staging) write(d driver, base, dst devptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(src) > maxStagedWrite {
		if err := s.flushAndWaitLocked(d); err != nil {
			return err
		}
		return d.upload(dst, src)
	}
	return s.stageLocked(d, base, dst, src, 1)
}

// stageLocked appends src, which carries writes Writes, to the staging
// memory as a copy to dst, merged with the last copy when it continues it.
func (s *staging) stageLocked(d driver, base, dst devptr, src []byte, writes int) error {
	if s.n+len(src) > len(s.buf) {
		if err := s.grow(d, s.n+len(src)); err != nil {
			return err
		}
	}
	copy(s.buf[s.n:], src)
	if k := len(s.copies) - 1; k >= 0 && s.copies[k].base == base && s.copies[k].dst+devptr(s.copies[k].n) == dst && s.copies[k].off+s.copies[k].n == s.n {
		s.copies[k].n += len(src)
		s.copies[k].writes += writes
	} else {
		s.copies = append(s.copies, stagedCopy{base: base, dst: dst, off: s.n, n: len(src), writes: writes})
	}
	s.n += len(src)
	return nil
}

// writeInput sets src at off in the host copy of x, an input block, for
// the next Run to copy.
func (s *staging) writeInput(x *Buffer, off int, src []byte) {
	if len(src) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	copy(x.host[off:], src)
	if x.writes == 0 {
		s.blocks = append(s.blocks, x)
		x.lo, x.hi = off, off+len(src)
	} else {
		x.lo, x.hi = min(x.lo, off), max(x.hi, off+len(src))
	}
	x.writes++
}

// stageBlocksLocked stages the written span of each input block written
// since the last Run, as one copy each.
func (s *staging) stageBlocksLocked(d driver) error {
	for _, x := range s.blocks {
		if err := s.stageLocked(d, x.ptr, x.ptr+devptr(x.lo), x.host[x.lo:x.hi], x.writes); err != nil {
			return err
		}
		x.writes = 0
	}
	clear(s.blocks)
	s.blocks = s.blocks[:0]
	return nil
}

// grow replaces the staging memory by at least n bytes, keeping what is
// staged. Nothing is being copied from it: copies are queued and waited
// for with s.mu held.
func (s *staging) grow(d driver, n int) error {
	size := max(2*len(s.buf), n, minStaging)
	nb, err := d.hostAlloc(size)
	if err != nil {
		return fmt.Errorf("cuda: %d bytes of host staging memory: %w", size, err)
	}
	copy(nb, s.buf[:s.n])
	if s.buf != nil {
		d.hostFree(s.buf)
	}
	s.buf = nb
	return nil
}

// queueLocked queues the staged copies on the stream (between enter and
// exit), returning how many copies and how many writes they carry. The
// staging memory stays untouched until resetLocked, after a sync.
func (s *staging) queueLocked(d driver) (copies, writes int, err error) {
	if err := s.stageBlocksLocked(d); err != nil {
		return 0, 0, err
	}
	for _, c := range s.copies {
		if err := d.uploadAsync(c.dst, s.buf[c.off:c.off+c.n]); err != nil {
			return copies, writes, fmt.Errorf("cuda: copying %d bytes of inputs to the device: %w", c.n, err)
		}
		copies++
		writes += c.writes
	}
	return copies, writes, nil
}

// resetLocked empties the staging memory, once its copies have finished.
func (s *staging) resetLocked() {
	s.n = 0
	s.copies = s.copies[:0]
}

// flushAndWait copies what is staged and waits for it.
func (s *staging) flushAndWait(d driver) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flushAndWaitLocked(d)
}

func (s *staging) flushAndWaitLocked(d driver) error {
	if len(s.copies) == 0 && len(s.blocks) == 0 {
		return nil
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer d.exit()
	_, _, err := s.queueLocked(d)
	if serr := d.sync(); err == nil {
		err = serr
	}
	s.resetLocked()
	return err
}

// drop forgets the staged writes into the allocation at base, which is
// being freed.
func (s *staging) drop(base devptr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.copies[:0]
	for _, c := range s.copies {
		if c.base != base {
			kept = append(kept, c)
		}
	}
	s.copies = kept
	blocks := s.blocks[:0]
	for _, x := range s.blocks {
		if x.ptr != base {
			blocks = append(blocks, x)
		} else {
			x.writes = 0
		}
	}
	clear(s.blocks[len(blocks):])
	s.blocks = blocks
}

// close releases the staging memory, dropping what is staged.
func (s *staging) close(d driver) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buf != nil {
		d.hostFree(s.buf)
	}
	s.buf, s.n, s.copies, s.blocks = nil, 0, nil, nil
}
