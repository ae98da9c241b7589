package cuda

// readXorLaunch reads words (a multiple of 4) 32-bit words at x with
// blocks blocks, writing one XOR per block to out [blocks].
func readXorLaunch(out, x devptr, words, blocks int) *launch {
	return newLaunch("read_xor_u32", grid1(blocks), 256).ptr(out).ptr(x).u64(words)
}
