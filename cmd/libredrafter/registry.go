//go:build cgo

package main

import (
	"runtime/cgo"
	"sync"
)

// kind is what a handle stands for; a handle of one kind passed where the
// other is expected is refused, as a freed one is.
type kind uint8

const (
	kindEngine kind = iota + 1
	kindSession
)

func (k kind) String() string {
	if k == kindEngine {
		return "engine"
	}
	return "session"
}

// registry is the set of live handles. cgo.Handle.Value panics on a handle
// already deleted, and C callers can pass any number, so every handle is
// looked up here first. cgo handles are never reused, so a freed handle stays
// invalid for good, even after new objects are made.
type registry struct {
	mu   sync.Mutex
	live map[cgo.Handle]kind
}

var handles = registry{live: map[cgo.Handle]kind{}}

// add makes a handle for v.
func (r *registry) add(k kind, v any) uint64 {
	h := cgo.NewHandle(v)
	r.mu.Lock()
	r.live[h] = k
	r.mu.Unlock()
	return uint64(h)
}

// get returns the object of a live handle of kind k, or nil.
func (r *registry) get(id uint64, k kind) any {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := cgo.Handle(id)
	if r.live[h] != k {
		return nil
	}
	return h.Value()
}

// remove ends a live handle of kind k and reports whether it was live: of
// two threads freeing the same handle, one gets true.
func (r *registry) remove(id uint64, k kind) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := cgo.Handle(id)
	if r.live[h] != k {
		return false
	}
	delete(r.live, h)
	h.Delete()
	return true
}
