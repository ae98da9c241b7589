package metal

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// KV cache sizing. A session's KV cache is allocated whole for its context,
// and attention binds all of it, so on a unified-memory GPU the whole cache
// is resident: Llama 3.1 8B's 131072 tokens take 32 GiB in f32 and 16 GiB
// in f16, more than most Macs' GPU working set. The budget below caps the
// default context so that the cache fits, and the GPU's default cache is
// f16.

// kvReserve is the share of the working set kept out of the KV budget for
// everything else a step needs: activations, the buffer pool (up to
// poolKeep), a draft head and its beams.
const kvReserve = 8 // one eighth

// kvRound is the granule a capped context is rounded down to.
const kvRound = 256

// DefaultKVCache is the KV cache element type a session gets when the user
// does not choose one: f16 on the GPU, for half the memory and half the
// bytes attention reads (the runtime finds it through an optional
// interface).
func (b *Backend) DefaultKVCache() graph.DType { return graph.F16 }

// KVBudget is the number of bytes one session's KV cache may take: the
// device's recommendedMaxWorkingSetSize, less the host memory given to the
// device so far (the model's weights, through WrapHost), less an eighth of
// the working set kept for activations, the buffer pool and a draft head.
// It is -1 when the device does not report its working set (no limit).
func (b *Backend) KVBudget() int64 {
	ws := int64(b.dev.info().WorkingSet)
	if ws == 0 {
		return -1
	}
	b.mu.Lock()
	host := b.hostBytes
	b.mu.Unlock()
	return max(ws-host-ws/kvReserve, 0)
}

// KVContext caps a session's context to what KVBudget holds: it returns
// want when want tokens of bytesPerToken each (every layer's keys and
// values) fit, else the largest multiple of 256 tokens that does, with an
// error saying why; it returns 0 and an error when not even 256 fit.
func (b *Backend) KVContext(want int, bytesPerToken int64) (int, error) {
	return kvContext(want, bytesPerToken, b.KVBudget(), b.dev.info().WorkingSet)
}

func kvContext(want int, bytesPerToken, budget int64, workingSet uint64) (int, error) {
	if budget < 0 || bytesPerToken <= 0 || int64(want) <= budget/bytesPerToken {
		return want, nil
	}
	fits := int(budget/bytesPerToken) / kvRound * kvRound
	why := fmt.Sprintf("a KV cache of %d tokens takes %s, and this GPU has %s for it (%s recommended working set, less the weights and an eighth kept for the rest)",
		want, gib(uint64(bytesPerToken)*uint64(want)), gib(uint64(budget)), gib(workingSet))
	if fits < kvRound {
		return 0, fmt.Errorf("metal: %s", why)
	}
	return fits, fmt.Errorf("metal: context capped at %d tokens: %s", fits, why)
}
