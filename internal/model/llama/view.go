package llama

import "unsafe"

// f32View views little-endian float32 bytes in place (the data must be
// 4-byte aligned, which toF32 and the GGUF reader guarantee).
func f32View(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}
