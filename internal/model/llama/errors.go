package llama

import (
	"fmt"
	"math"
)

// NonFiniteError reports a forward pass whose logits (or hidden states)
// hold NaN or ±Inf: the model's weights, or its arithmetic, are broken, and
// no token can be chosen from them.
type NonFiniteError struct {
	What  string  // "logits" or "hidden state"
	Pos   int     // position in the sequence (from 0) of the token whose output it is
	Index int     // the first bad entry of that row (a vocabulary id for logits)
	Value float32 // NaN, +Inf or -Inf
}

func (e *NonFiniteError) Error() string {
	v := "NaN"
	if math.IsInf(float64(e.Value), 1) {
		v = "+Inf"
	} else if math.IsInf(float64(e.Value), -1) {
		v = "-Inf"
	}
	return fmt.Sprintf("llama: the model produced %s %s at position %d (entry %d); its weights may hold NaN or Inf", v, e.What, e.Pos, e.Index)
}
