package emu

import (
	"os"
	"slices"
	"testing"

	msl "github.com/seed9b8f47b1/redrafter/internal/backend/metal/shaders"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestLibraryCompiles builds every kernel file and checks that the compiled
// program holds exactly the kernels the source instantiates.
func TestLibraryCompiles(t *testing.T) {
	b := ForTest(t)
	lib, err := msl.Library()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range msl.Files() {
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			src, err := msl.Source(f)
			if err != nil {
				t.Fatal(err)
			}
			p, err := b.Build(f, src)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.List()
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, k := range lib {
				if k.File == f {
					want = append(want, k.Name)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: compiled kernels %v, source instantiates %v", f, got, want)
			}
		})
	}
}
