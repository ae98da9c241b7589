package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The files an HF checkpoint directory may carry its tokenizer in, in the
// order the loader tries them.
var tokenizerFiles = []string{"tokenizer.json", "tokenizer.model"}

// checkModelPath checks, before loading, that path (given as flag) can be
// a model, and says what to do when it cannot: the loader's own errors
// name the file and the offset of a broken model, these name the flag.
func checkModelPath(flag, path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", flag, path, plainErr(err))
	}
	if !st.IsDir() {
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%s %s: not a model file or directory (it is a %s)", flag, path, fileKind(st.Mode()))
		}
		return nil
	}
	if isDrafterDir(path) {
		return fmt.Errorf("%s %s is a ReDrafter draft head, not a model: pass it as --drafter, with the model it drafts for as --model", flag, path)
	}
	if !exists(filepath.Join(path, "config.json")) {
		return fmt.Errorf("%s %s: not a model directory: it has no config.json (a model is a .gguf file, or a directory with config.json, model.safetensors and a tokenizer)", flag, path)
	}
	for _, name := range tokenizerFiles {
		if exists(filepath.Join(path, name)) {
			return nil
		}
	}
	return fmt.Errorf("%s %s: no tokenizer: looked for %s and %s in it", flag, path, tokenizerFiles[0], tokenizerFiles[1])
}

// checkDrafterPath checks that path can be a draft head directory.
func checkDrafterPath(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("--drafter %s: %w", path, plainErr(err))
	}
	if !st.IsDir() {
		return fmt.Errorf("--drafter %s: a draft head is a directory (config.json + model.safetensors), not a file", path)
	}
	if exists(filepath.Join(path, "config.json")) && !isDrafterDir(path) {
		return fmt.Errorf("--drafter %s is a model, not a ReDrafter draft head: pass it as --model, or make a head for it with distill and train-drafter", path)
	}
	return nil
}

// checkInput checks that the input file or directory given as flag
// exists, so that its error names the flag.
func checkInput(flag, path string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%s %s: %w", flag, path, plainErr(err))
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// plainErr drops the operation and path of a *fs.PathError ("stat x: no
// such file or directory" becomes "no such file or directory"): the
// caller names the path itself.
func plainErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// fileKind names what a non-regular file is.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}
