package formats_test

import (
	"bytes"
	"fmt"
	"log"

	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

func ExampleOpenGGUF() {
	g, err := formats.OpenGGUF("../../../models/stories260K/stories260K.gguf")
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close() // every Tensor.Data is invalid after this

	layers, _ := g.Uint("llama.block_count")
	fmt.Println(g.Architecture(), "blocks:", layers)
	emb, _ := g.Tensor("token_embd.weight")
	fmt.Println(emb) // GGUF ne [64 512], outermost first
	// Output:
	// llama blocks: 5
	// token_embd.weight F32 [512 64]
}

func ExampleWriteSafetensors() {
	w := formats.Tensor{Name: "w", DType: formats.F32, Shape: []int{1, 2}, Data: make([]byte, 8)}
	var buf bytes.Buffer
	if err := formats.WriteSafetensors(&buf, []formats.Tensor{w}, map[string]string{"format": "pt"}); err != nil {
		log.Fatal(err)
	}
	st, err := formats.ParseSafetensors("mem", buf.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	header := buf.Bytes()[8:st.DataOffset] // padded with spaces to a multiple of 8
	fmt.Printf("%s\n%v\n", bytes.TrimRight(header, " "), &st.Tensors[0])
	// Output:
	// {"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}}
	// w F32 [1 2]
}
