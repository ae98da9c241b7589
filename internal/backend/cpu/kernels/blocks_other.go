//go:build !amd64 || noasm

package kernels

import "github.com/seed9b8f47b1/redrafter/internal/quant"

// Without assembly every format decodes with package quant's reference.
func decodeBlocksFast(t quant.GGML, dst []float32, src []byte) bool { return false }
