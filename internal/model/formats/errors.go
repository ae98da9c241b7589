package formats

import "fmt"

// FormatError reports a malformed file: which file, where and what is wrong.
type FormatError struct {
	Format string // "gguf" or "safetensors"
	Path   string
	Offset int64 // byte offset of the problem in the file; -1 if it has no single place
	Msg    string
}

func (e *FormatError) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("%s: %s: %s", e.Format, e.Path, e.Msg)
	}
	return fmt.Sprintf("%s: %s: offset %d: %s", e.Format, e.Path, e.Offset, e.Msg)
}

// UnsupportedError reports a well-formed file that uses something this package
// does not handle, such as GGUF v1 or an unknown tensor type.
type UnsupportedError struct {
	Format string // "gguf" or "safetensors"
	Path   string
	What   string // e.g. `version 1`, `tensor "x": ggml type 31`
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s: %s: unsupported %s", e.Format, e.Path, e.What)
}
