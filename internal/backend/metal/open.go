package metal

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	msl "github.com/seed9b8f47b1/redrafter/internal/backend/metal/shaders"
)

// minAppleFamily is the oldest GPU family the kernels run on: Apple7 (M1,
// A14) is the first with simdgroup matrices.
const minAppleFamily = 7

// Open returns a backend on the system's default GPU, with the device's
// default policy and the environment's overrides. Without Metal (any OS
// but macOS), or on a GPU older than Apple Silicon's, it returns an error
// that says so. Kernels are compiled on first use; see BuildKernels.
func Open() (*Backend, error) {
	dev, err := openDevice()
	if err != nil {
		return nil, err
	}
	inf := dev.info()
	if n, ok := appleFamily(inf.Family); !ok || n < minAppleFamily {
		dev.close()
		return nil, fmt.Errorf("metal: %s (GPU family %s) is not supported: the kernels need Apple%d or later (Apple Silicon)",
			inf.Name, orUnknown(inf.Family), minAppleFamily)
	}
	p, err := DefaultPolicy(inf).WithEnv()
	if err != nil {
		dev.close()
		return nil, err
	}
	return newBackend(dev, p), nil
}

// appleFamily parses "Apple8" as 8.
func appleFamily(f string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(f, "Apple"))
	return n, err == nil && strings.HasPrefix(f, "Apple")
}

// openBuilt is the backend registered as "metal": Open, then every kernel
// built, so that a GPU whose kernels Apple's compiler refuses fails here,
// naming the file and with the compiler's log, and "auto" moves on to the
// CPU, rather than failing in the middle of a generation.
func openBuilt() (*Backend, error) {
	b, err := Open()
	if err != nil {
		return nil, err
	}
	if err := b.BuildKernels(); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// BuildKernels compiles every kernel file of the library and builds every
// pipeline, the files in parallel. The error names each file that failed.
func (b *Backend) BuildKernels() error {
	lib, err := msl.Library()
	if err != nil {
		return err
	}
	byFile := map[string][]string{}
	var files []string
	for _, k := range lib {
		f := kernelFamily(k.Name)
		if byFile[f] == nil {
			files = append(files, f)
		}
		byFile[f] = append(byFile[f], k.Name)
	}
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() {
			for _, name := range byFile[f] {
				if _, err := b.pipeline(name); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
