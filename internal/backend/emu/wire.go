package emu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Request is one dispatch, as the dispatcher reads it (driver.cpp).
type Request struct {
	Kernel string
	Grid   [3]int // threadgroups (blocks)
	Group  [3]int // threads per threadgroup (block)
	// Buffers are the device buffers by binding index; Run replaces each
	// Data with the buffer's contents after the dispatch.
	Buffers []Buffer
	// Threadgroup is the threadgroup memory length by index (0 to 7).
	Threadgroup map[int]int
	// Orders are the thread orders to run the dispatch in, each from the
	// same buffers; results that differ bit for bit between them are an
	// error (a race). Nil means DefaultOrders.
	Orders []Order
}

// Buffer is one device buffer of a Request.
type Buffer struct {
	Index int
	Data  []byte
}

// Run executes r with the program at path and copies the results into
// r.Buffers. A failure of the dispatch itself (a race, a fault, a
// barrier not reached by every thread) is an error with the dispatcher's
// message.
func Run(path string, r *Request) error {
	orders := r.Orders
	if orders == nil {
		var err error
		if orders, err = DefaultOrders(); err != nil {
			return err
		}
	}
	var req bytes.Buffer
	u32 := func(v int) { _ = binary.Write(&req, binary.LittleEndian, uint32(v)) }
	u64 := func(v uint64) { _ = binary.Write(&req, binary.LittleEndian, v) }
	req.WriteString("EMU2")
	u32(len(r.Kernel))
	req.WriteString(r.Kernel)
	for _, v := range r.Grid {
		u32(v)
	}
	for _, v := range r.Group {
		u32(v)
	}
	u32(len(r.Buffers))
	for _, b := range r.Buffers {
		u32(b.Index)
		u64(uint64(len(b.Data)))
		req.Write(b.Data)
	}
	u32(len(r.Threadgroup))
	for i := 0; i < 8; i++ {
		if n, ok := r.Threadgroup[i]; ok {
			u32(i)
			u64(uint64(n))
		}
	}
	u32(len(orders))
	for _, o := range orders {
		u32(int(o.kind))
		u64(o.seed)
	}
	cmd := exec.Command(path)
	cmd.Stdin = &req
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return errors.New(msg)
	}
	out := stdout.Bytes()
	for i := range r.Buffers {
		n := len(r.Buffers[i].Data)
		if len(out) < n {
			return fmt.Errorf("short reply")
		}
		copy(r.Buffers[i].Data, out[:n])
		out = out[n:]
	}
	return nil
}

// List asks the program at path for its kernel names, as the dispatcher
// sees them.
func List(path string) ([]string, error) {
	out, err := exec.Command(path, "--list").Output()
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}
