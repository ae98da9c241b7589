package cpu

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// KVWriteOp, KVCompactOp; mirrors internal/backend/metal/kv.go.

// kvWrite copies rows [N, KVH, D] into the cache [KVH, C, D] at kvLen: row
// i's head h to position kvLen+i of head h (an f16 cache gets them rounded
// to the nearest half).
func kvWrite(cache, rows, kvLen graph.Operand) error {
	kvh, c, d := cache.Shape[0], cache.Shape[1], cache.Shape[2]
	n := rows.Shape[0]
	at := int(i32(kvLen)[0])
	if at < 0 || at+n > c {
		return fmt.Errorf("cache of %d positions cannot take %d more after %d", c, n, at)
	}
	src := f32(rows)
	for h := range kvh {
		for i := range n {
			dst, from := (h*c+at+i)*d, (i*kvh+h)*d
			if cache.DType == graph.F16 {
				kernels.ConvertF32ToF16(u16(cache)[dst:dst+d], src[from:from+d])
			} else {
				copy(f32(cache)[dst:dst+d], src[from:from+d])
			}
		}
	}
	return nil
}

// kvCompact moves positions kvLen+idx[i] to kvLen+i, in increasing i, in
// every head (rows of bytes: any cache dtype).
func kvCompact(cache, kvLen, idx graph.Operand) error {
	kvh, c, row := cache.Shape[0], cache.Shape[1], cache.Shape[2]*cache.DType.Size()
	at := int(i32(kvLen)[0])
	data := bytesOf(cache)
	prev := int32(-1)
	for i, j := range i32(idx) {
		if j <= prev || int(j) < i || at+int(j) >= c || at < 0 {
			return fmt.Errorf("compaction index %d at %d is not increasing within the cache", j, i)
		}
		prev = j
	}
	for h := range kvh {
		head := data[h*c*row : (h+1)*c*row]
		for i, j := range i32(idx) {
			if int(j) != i {
				copy(head[(at+i)*row:(at+i+1)*row], head[(at+int(j))*row:(at+int(j)+1)*row])
			}
		}
	}
	return nil
}
