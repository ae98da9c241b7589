package redrafter

import (
	"errors"

	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

// ErrClosed is returned by methods of an Engine or a Session after its
// Close (a Session's too after its Engine's).
var ErrClosed = errors.New("redrafter: closed")

// NonFiniteError reports a forward pass whose logits (or hidden states)
// hold NaN or ±Inf: the model's weights, or its arithmetic, are broken, and
// no token can be chosen from them. Generate returns it (wrapped; find it
// with errors.As) with the partial Result.
type NonFiniteError struct {
	What  string  // "logits" or "hidden state"
	Pos   int     // position in the sequence (from 0) of the token whose output it is
	Index int     // the first bad entry of that row (a vocabulary id for logits)
	Value float32 // NaN, +Inf or -Inf
}

// Error is the model's own message: the two types have the same fields,
// so one formats both.
func (e *NonFiniteError) Error() string { return (*llama.NonFiniteError)(e).Error() }

// publicError makes a model's non-finite error that err holds findable as
// a *NonFiniteError (the model's own type is internal), keeping err's
// message and what it wraps.
func publicError(err error) error {
	var nf *llama.NonFiniteError
	if !errors.As(err, &nf) {
		return err
	}
	public := NonFiniteError(*nf)
	return &nonFinite{err: err, public: &public}
}

// nonFinite is an error holding a model's non-finite error, as it came and
// as the API's type.
type nonFinite struct {
	err    error
	public *NonFiniteError
}

func (e *nonFinite) Error() string   { return e.err.Error() }
func (e *nonFinite) Unwrap() []error { return []error{e.err, e.public} }
