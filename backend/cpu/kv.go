package cpu

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/backend/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/graph"
)

// KVWriteOp, KVCompactOp; mirrors backend/metal/kv.go.

// kvWrite copies rows into the cache at kvLen (an f16 cache gets them
// rounded to the nearest half).
func kvWrite(cache, rows, kvLen graph.Operand) error {
	c, row := cache.Shape[0], cache.Shape[1]*cache.Shape[2]
	n := rows.Shape[0]
	at := int(i32(kvLen)[0])
	if at < 0 || at+n > c {
		return fmt.Errorf("cache of %d positions cannot take %d more after %d", c, n, at)
	}
	if cache.DType == graph.F16 {
		kernels.ConvertF32ToF16(u16(cache)[at*row:(at+n)*row], f32(rows))
		return nil
	}
	copy(f32(cache)[at*row:(at+n)*row], f32(rows))
	return nil
}

// kvCompact moves rows kvLen+idx[i] to kvLen+i, in increasing i (rows of
// bytes: any cache dtype).
func kvCompact(cache, kvLen, idx graph.Operand) error {
	c, row := cache.Shape[0], cache.Shape[1]*cache.Shape[2]*cache.DType.Size()
	at := int(i32(kvLen)[0])
	data := bytesOf(cache)
	prev := int32(-1)
	for i, j := range i32(idx) {
		if j <= prev || int(j) < i || at+int(j) >= c || at < 0 {
			return fmt.Errorf("compaction index %d at %d is not increasing within the cache", j, i)
		}
		prev = j
		if int(j) != i {
			copy(data[(at+i)*row:(at+i+1)*row], data[(at+int(j))*row:(at+int(j)+1)*row])
		}
	}
	return nil
}
