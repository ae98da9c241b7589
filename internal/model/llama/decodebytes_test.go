package llama

import "testing"

// TestDecodeBytes counts stories260K's weights by its shapes: a decode step
// reads every layer's matrices and norms, the final norm, the output
// projection and one embedding row, or the whole table when it is tied.
func TestDecodeBytes(t *testing.T) {
	ck, err := Open(storiesGGUF)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	m := ck.Model
	c := m.Config
	kv := c.KVHeads * c.HeadDim
	perLayer := c.Dim*c.Heads*c.HeadDim*2 + kv*c.Dim*2 + c.FFN*c.Dim*3 + 2*c.Dim
	floats := c.Layers*perLayer + c.Dim + c.Vocab*c.Dim + c.Dim
	if got, want := m.DecodeBytes(nil), int64(4*floats); got != want {
		t.Errorf("untied: DecodeBytes = %d, want %d", got, want)
	}
	m.Config.TiedOutput = true // the table is the projection: read whole, once
	floats = c.Layers*perLayer + c.Dim + c.Vocab*c.Dim
	if got, want := m.DecodeBytes(nil), int64(4*floats); got != want {
		t.Errorf("tied: DecodeBytes = %d, want %d", got, want)
	}
}
