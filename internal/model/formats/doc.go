// Package formats reads model files — GGUF, safetensors (single files and
// sharded checkpoint directories) and Hugging Face config.json — without
// copying tensor data.
//
// Specifications implemented:
//
//   - GGUF v2 and v3, little-endian (ggml-org/ggml docs/gguf.md), with the
//     ggml block layouts of ggml-common.h for sizing quantized tensors.
//   - safetensors (huggingface/safetensors README, "Format"), and the
//     model.safetensors.index.json weight map written by transformers for
//     sharded checkpoints.
//   - config.json as written by transformers for the Llama, Mistral and
//     Qwen2 families, including the quantization block of MLX checkpoints.
//
// # Shapes
//
// Every Tensor.Shape is row-major with the outermost dimension first, as in
// PyTorch. GGUF stores dimensions innermost first (ne[0] is contiguous), so
// the GGUF reader reverses them: a Linear weight with ne = [in, out] has
// Shape [out, in], which is also its safetensors shape.
//
// # Memory and lifetimes
//
// OpenGGUF and OpenSafetensors map the file read-only (mmap on Linux and
// macOS; other systems read the whole file into memory). Tensor.Data is a
// view into that mapping:
//
//   - It must not be written to. On Linux and macOS a write faults and kills
//     the process.
//   - It is valid only until Close. Using it afterwards faults. There is no
//     finalizer: a *GGUF or *Safetensors dropped without Close stays mapped
//     for the life of the process, which is also what keeps views taken from
//     it valid.
//   - If another process truncates the file while it is mapped, reading the
//     lost pages raises SIGBUS.
//
// Metadata (keys, strings, arrays, shapes) is copied out and stays valid
// after Close.
//
// Alignment: GGUF tensor data starts at a multiple of general.alignment (32
// unless the file says otherwise) from the start of the file, and a mapping
// starts on a page boundary, so F32 data of a mapped GGUF file can be viewed
// as []float32 without copying. Safetensors lays tensors out back to back
// after an 8-byte-aligned header, so one tensor with an odd byte size
// misaligns every tensor after it: consumers must check the alignment of
// Tensor.Data before viewing it as wider elements, and copy when it is
// unaligned. Tensor.Float32s does both.
//
// # Errors
//
// Malformed files give a *FormatError (with the byte offset of the problem),
// and well-formed files using something this package cannot handle (GGUF v1,
// an unknown ggml type, a new safetensors dtype) give an *UnsupportedError.
// Both messages start with the format name and the path. Missing files give
// errors that wrap fs.ErrNotExist. The parsers are written for hostile input:
// every count and length is checked against the bytes that remain before
// anything is allocated, preallocation from counts is capped, sizes are
// overflow-checked, and both parsers are fuzzed.
package formats
