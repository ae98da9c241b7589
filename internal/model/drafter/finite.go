package drafter

import "fmt"

// checkFinite refuses the head's logits ([rows, v], for draft t of a beam
// search) when they hold NaN or ±Inf: the search would rank garbage and
// every draft be rejected, a broken head passing for a slow one.
func checkFinite(logits []float32, v, t int) error {
	for i, x := range logits {
		if x-x != 0 { // NaN and ±Inf alone give NaN
			kind := "NaN"
			if x > 0 {
				kind = "+Inf"
			} else if x < 0 {
				kind = "-Inf"
			}
			return fmt.Errorf("drafter: the draft head produced %s logits for draft %d (row %d, entry %d); its weights may hold NaN or Inf", kind, t, i/v, i%v)
		}
	}
	return nil
}
