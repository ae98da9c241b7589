package formats

import (
	"errors"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"testing"
)

// writeShards writes shard files of tensor names and an index (if index is
// not empty) into a new directory.
func writeShards(t *testing.T, shards map[string][]string, index string) string {
	t.Helper()
	dir := t.TempDir()
	for file, names := range shards {
		var ts []Tensor
		for _, n := range names {
			ts = append(ts, codedTensor(n, F32, 2, 3))
		}
		writeFile(t, dir, file, writeSafetensorsBytes(t, ts, map[string]string{"format": "pt"}))
	}
	if index != "" {
		writeFile(t, dir, stIndexFile, []byte(index))
	}
	return dir
}

func TestCheckpointSingle(t *testing.T) {
	dir := writeShards(t, map[string][]string{"model.safetensors": {"a", "b"}}, "")
	c, err := OpenSafetensorsDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Files) != 1 || len(c.Tensors) != 2 {
		t.Errorf("%d files, %d tensors; want 1, 2", len(c.Files), len(c.Tensors))
	}
	if tt, ok := c.Tensor("b"); !ok || tt.Name != "b" || len(tt.Data) != 24 {
		t.Errorf("Tensor(b) = %v, %v", tt, ok)
	}
}

func TestCheckpointSharded(t *testing.T) {
	dir := writeShards(t, map[string][]string{
		"model-00001-of-00002.safetensors": {"model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight"},
		"model-00002-of-00002.safetensors": {"lm_head.weight", "extra.not.in.index"},
		"model.safetensors":                {"a stray file the index overrides"},
	}, `{"metadata": {"total_size": 72}, "weight_map": {
		"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
		"model.layers.0.mlp.up_proj.weight": "model-00001-of-00002.safetensors",
		"lm_head.weight": "model-00002-of-00002.safetensors"}}`)
	c, err := OpenSafetensorsDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := slices.Sorted(maps.Keys(c.Tensors))
	want := []string{"extra.not.in.index", "lm_head.weight", "model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight"}
	if !slices.Equal(names, want) || len(c.Files) != 2 {
		t.Errorf("tensors %q in %d files, want %q in 2", names, len(c.Files), want)
	}
	if filepath.Base(c.Files[1].Path) != "model-00002-of-00002.safetensors" {
		t.Errorf("Files[1] = %s", c.Files[1].Path)
	}
	lm, _ := c.Tensor("lm_head.weight")
	if v, err := lm.Float32s(); err != nil || v[4] != 11 {
		t.Errorf("lm_head.weight values %v, %v", v, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if lm.Data != nil {
		t.Errorf("Data still set after Close")
	}
}

func TestCheckpointErrors(t *testing.T) {
	const one, two = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
	cases := []struct {
		name     string
		shards   map[string][]string
		index    string
		notExist bool
		want     string
	}{
		{"empty dir", nil, "", true, "no model.safetensors or model.safetensors.index.json"},
		{"missing shard", map[string][]string{one: {"a"}},
			`{"weight_map": {"a": "` + one + `", "b": "` + two + `"}}`, true, two},
		{"in two shards", map[string][]string{one: {"a", "b"}, two: {"b"}},
			`{"weight_map": {"a": "` + one + `", "b": "` + two + `"}}`, false, `tensor "b" is in both ` + one + ` and ` + two},
		{"wrong shard", map[string][]string{one: {"a", "b"}, two: {"c"}},
			`{"weight_map": {"a": "` + one + `", "b": "` + two + `", "c": "` + two + `"}}`, false, `index maps tensor "b" to ` + two + `, but it is in ` + one},
		{"missing tensor", map[string][]string{one: {"a"}},
			`{"weight_map": {"a": "` + one + `", "z": "` + one + `"}}`, false, `index maps tensor "z" to ` + one + `, which does not have it`},
		{"escape", map[string][]string{one: {"a"}},
			`{"weight_map": {"a": "../` + one + `"}}`, false, `tensor "a": file "../` + one + `" is not inside the directory`},
		{"absolute", map[string][]string{one: {"a"}},
			`{"weight_map": {"a": "/etc/passwd"}}`, false, `is not inside the directory`},
		{"bad index", nil, `{"weight_map": [`, false, "model.safetensors.index.json: unexpected end of JSON input"},
		{"empty weight_map", nil, `{"metadata": {}}`, false, "weight_map is missing or empty"},
		{"bad shard", map[string][]string{one: {"a"}, two: nil},
			`{"weight_map": {"a": "` + one + `", "b": "` + two + `"}}`, false, two + ": offset 0: header length"},
	}
	for _, c := range cases {
		dir := writeShards(t, c.shards, c.index)
		if c.name == "bad shard" {
			writeFile(t, dir, two, []byte("not safetensors"))
		}
		ck, err := OpenSafetensorsDir(dir)
		checkErr(t, "OpenSafetensorsDir("+c.name+")", err, "", c.want)
		if ck != nil {
			t.Errorf("OpenSafetensorsDir(%s) returned a checkpoint with an error", c.name)
		}
		if got := errors.Is(err, fs.ErrNotExist); got != c.notExist {
			t.Errorf("OpenSafetensorsDir(%s): errors.Is(%v, fs.ErrNotExist) = %v, want %v", c.name, err, got, c.notExist)
		}
	}
	_, err := OpenSafetensorsDir(filepath.Join(t.TempDir(), "nope"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenSafetensorsDir(missing dir) = %v, want fs.ErrNotExist", err)
	}
}
