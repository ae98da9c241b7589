package cpu

// BeamChainsOp, AcceptChainsOp: the greedy ReDrafter step's layout of the
// beams as a verification batch and its acceptance (internal/graph/chains.go);
// mirrors internal/backend/metal/chains.go. Written as the definitions read: they
// touch a few hundred integers per step.

// beamChains is BeamChainsOp: tree and out are [1+w·(l-1)], sel [3,w].
func beamChains(out, tree, sel []int32, depth int) {
	w := len(sel) / 3
	c := (len(tree) - 1) / w // l-1 drafts per chain
	out[0] = tree[0]
	for i := range w {
		src := int(sel[i])
		if src < 0 || src >= w {
			src = i
		}
		for t := 1; t <= c; t++ {
			if t == depth {
				out[1+i*c+t-1] = sel[w+i]
			} else {
				out[1+i*c+t-1] = tree[1+src*c+t-1]
			}
		}
	}
}

// acceptChains is AcceptChainsOp: tokens and argmax are [1+w·(l-1)], out
// [3,l].
func acceptChains(out, tokens, argmax []int32, w int) {
	c := (len(tokens) - 1) / w
	l := c + 1
	row := func(i, t int) int {
		if t == 0 {
			return 0
		}
		return 1 + i*c + t - 1
	}
	b, n := 0, -1
	for i := range w {
		k := 0
		for k < c && tokens[row(i, k+1)] == argmax[row(i, k)] {
			k++
		}
		if k > n { // strictly longer: ties keep the lower beam
			b, n = i, k
		}
	}
	path, emit, tail := out[:l], out[l:2*l], out[2*l:]
	for t := range l {
		path[t] = int32(row(b, t))
		emit[t] = -1
		tail[t] = 0
	}
	for t := 1; t <= n; t++ {
		emit[t-1] = tokens[row(b, t)]
	}
	emit[n] = argmax[row(b, n)]
	tail[0], tail[1] = int32(row(b, n)), int32(n)
}
