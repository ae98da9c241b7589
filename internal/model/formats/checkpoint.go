package formats

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// Checkpoint is a Hugging Face checkpoint directory: one model.safetensors,
// or shards listed by model.safetensors.index.json.
type Checkpoint struct {
	Dir string
	// Files are the open safetensors files, sorted by path.
	Files []*Safetensors
	// Tensors maps every tensor name to its tensor in Files.
	Tensors map[string]*Tensor
}

const (
	stSingleFile = "model.safetensors"
	stIndexFile  = "model.safetensors.index.json"
)

// OpenSafetensorsDir opens the checkpoint in dir. If dir has
// model.safetensors.index.json, every file its weight_map names is opened and
// each tensor must be in the file the index names; otherwise dir must have
// model.safetensors. A tensor found in two files is an error, and so is an
// index naming a file outside dir. Tensors a shard holds but the index does
// not name are included. Close releases every file.
func OpenSafetensorsDir(dir string) (*Checkpoint, error) {
	index := filepath.Join(dir, stIndexFile)
	raw, err := ReadFile(index)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		single := filepath.Join(dir, stSingleFile)
		if _, err := os.Stat(single); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("safetensors: %s: no %s or %s: %w", dir, stSingleFile, stIndexFile, fs.ErrNotExist)
		}
		return openCheckpoint(dir, []string{stSingleFile}, nil)
	case err != nil:
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", index, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("safetensors: %s: weight_map is missing or empty", index)
	}
	var files []string
	for name, file := range idx.WeightMap {
		if !filepath.IsLocal(filepath.FromSlash(file)) {
			return nil, fmt.Errorf("safetensors: %s: tensor %q: file %q is not inside the directory", index, name, file)
		}
		if !slices.Contains(files, file) {
			files = append(files, file)
		}
	}
	return openCheckpoint(dir, files, idx.WeightMap)
}

// openCheckpoint opens files (relative to dir) and checks them against
// weightMap, if there is one.
func openCheckpoint(dir string, files []string, weightMap map[string]string) (_ *Checkpoint, err error) {
	slices.Sort(files)
	c := &Checkpoint{Dir: dir, Tensors: map[string]*Tensor{}}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	fileOf := map[string]string{} // tensor name -> file it was found in
	for _, file := range files {
		st, err := OpenSafetensors(filepath.Join(dir, filepath.FromSlash(file)))
		if err != nil {
			return nil, err
		}
		c.Files = append(c.Files, st)
		for i := range st.Tensors {
			t := &st.Tensors[i]
			if other, dup := fileOf[t.Name]; dup {
				return nil, fmt.Errorf("safetensors: %s: tensor %q is in both %s and %s", dir, t.Name, other, file)
			}
			fileOf[t.Name] = file
			c.Tensors[t.Name] = t
		}
	}
	names := make([]string, 0, len(weightMap))
	for name := range weightMap {
		names = append(names, name)
	}
	slices.Sort(names) // report the first problem deterministically
	for _, name := range names {
		if got, want := fileOf[name], weightMap[name]; got != want {
			if got == "" {
				return nil, fmt.Errorf("safetensors: %s: index maps tensor %q to %s, which does not have it", dir, name, want)
			}
			return nil, fmt.Errorf("safetensors: %s: index maps tensor %q to %s, but it is in %s", dir, name, want, got)
		}
	}
	return c, nil
}

// Tensor returns the tensor with the given name.
func (c *Checkpoint) Tensor(name string) (*Tensor, bool) {
	t, ok := c.Tensors[name]
	return t, ok
}

// Close closes every file; every Tensor.Data is invalid afterwards.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.Files {
		errs = append(errs, f.Close())
	}
	c.Files = nil
	return errors.Join(errs...)
}
