package convert

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// encoder collects the output tensors of one checkpoint.
type encoder struct {
	opt *Options
	// half is the float type of stored matrices and scales: F16, or BF16
	// for a bf16 model (F32 when converting to f32).
	half      formats.DType
	tensors   []formats.Tensor
	overrides map[string]bool // module path → false: left unquantized
	total     int             // matrices and vectors to write, for progress
	done      int
	c         counts
}

func newEncoder(opt *Options, src graph.DType, total int) *encoder {
	e := &encoder{opt: opt, half: formats.F16, overrides: map[string]bool{}, total: total}
	switch {
	case opt.Bits == 32:
		e.half = formats.F32
	case src == graph.BF16:
		e.half = formats.BF16
	}
	return e
}

func (e *encoder) progress(name, what string) {
	e.done++
	if e.opt.Progress != nil {
		e.opt.Progress(e.done, e.total, name, what)
	}
}

// encode stores values v in dt (F32, F16 or BF16).
func encode(v []float32, dt formats.DType) []byte {
	switch dt {
	case formats.F16:
		return graph.AsBytes(quant.F32sToF16(v))
	case formats.BF16:
		return graph.AsBytes(quant.F32sToBF16(v))
	}
	return append([]byte(nil), graph.AsBytes(v)...)
}

func (e *encoder) add(name string, dt formats.DType, shape []int, data []byte) {
	e.tensors = append(e.tensors, formats.Tensor{Name: name, DType: dt, Shape: slices.Clone(shape), Data: data})
	e.c.bytes += int64(len(data))
}

// matrix stores the weight of module path, values v [rows, cols]:
// quantized unless the options keep it or its rows are not whole groups.
// alias is "embed", "vocab" or "" (see Options.Keep).
func (e *encoder) matrix(path, alias string, v []float32, rows, cols int) error {
	name := path + ".weight"
	o := e.opt
	if o.quantized() && !o.kept(path, alias) && cols%o.GroupSize == 0 {
		e.progress(name, fmt.Sprintf("%d-bit, groups of %d", o.Bits, o.GroupSize))
		codes, s, b, err := quant.QuantizeAffine(v, cols, o.Bits, o.GroupSize)
		if err != nil {
			return fmt.Errorf("convert: %s: %w", name, err)
		}
		e.add(name, formats.U32, []int{rows, cols * o.Bits / 32}, append([]byte(nil), graph.AsBytes(codes)...))
		e.add(path+".scales", e.half, []int{rows, cols / o.GroupSize}, encode(s, e.half))
		e.add(path+".biases", e.half, []int{rows, cols / o.GroupSize}, encode(b, e.half))
		e.c.quantized++
		return nil
	}
	if o.quantized() {
		e.overrides[path] = false
		if !o.kept(path, alias) {
			e.c.skipped = append(e.c.skipped, name)
		}
	}
	e.progress(name, e.half.String())
	e.add(name, e.half, []int{rows, cols}, encode(v, e.half))
	e.c.kept++
	return nil
}

// vector stores a norm weight or bias in dt (its source type, or F32).
func (e *encoder) vector(name string, v []float32, dt formats.DType) {
	if e.opt.Bits == 32 {
		dt = formats.F32
	}
	e.progress(name, dt.String())
	e.add(name, dt, []int{len(v)}, encode(v, dt))
}

// quantizationBlock is config.json's "quantization" object.
func (e *encoder) quantizationBlock() map[string]any {
	if !e.opt.quantized() {
		return nil
	}
	q := map[string]any{"group_size": e.opt.GroupSize, "bits": e.opt.Bits, "mode": "affine"}
	for p := range e.overrides {
		q[p] = false
	}
	return q
}

// shardBytes is the largest safetensors file written; bigger checkpoints
// are sharded with an index, as transformers does.
var shardBytes int64 = 4 << 30

// writeCheckpoint writes the tensors as model.safetensors, or shards and
// model.safetensors.index.json, into dir.
func writeCheckpoint(ctx context.Context, dir string, tensors []formats.Tensor) error {
	slices.SortFunc(tensors, func(a, b formats.Tensor) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	var shards [][]formats.Tensor
	var size, total int64
	for _, t := range tensors {
		n := int64(len(t.Data))
		if len(shards) == 0 || (size > 0 && size+n > shardBytes) {
			shards = append(shards, nil)
			size = 0
		}
		shards[len(shards)-1] = append(shards[len(shards)-1], t)
		size += n
		total += n
	}
	meta := map[string]string{"format": "mlx"}
	if len(shards) <= 1 {
		return writeFile(ctx, filepath.Join(dir, "model.safetensors"), func(w *bufio.Writer) error {
			return formats.WriteSafetensors(w, tensors, meta)
		})
	}
	weightMap := map[string]string{}
	for i, sh := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		for _, t := range sh {
			weightMap[t.Name] = name
		}
		if err := writeFile(ctx, filepath.Join(dir, name), func(w *bufio.Writer) error {
			return formats.WriteSafetensors(w, sh, meta)
		}); err != nil {
			return err
		}
	}
	idx, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), append(idx, '\n'), 0o644)
}

func writeFile(ctx context.Context, path string, write func(*bufio.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(ctxWriter{ctx, f}, 1<<20)
	err = write(w)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ctxWriter fails every write once ctx is done, so that writing a large
// file stops within one buffer of a cancellation.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// ErrExists is the error of Model and Head, wrapped with the path, when
// the output already exists (or appeared while it was being written) and
// Options.Force is false; check for it with errors.Is.
var ErrExists = errors.New("output already exists")

// ErrNotOutput is the error of Model and Head, wrapped with what was
// found, when Options.Force asks to replace something that is not a
// checkpoint directory such as they write: Force never deletes a folder
// of other files.
var ErrNotOutput = errors.New("not a model or draft head directory")

// ErrOutputIsInput is the error of Model and Head, wrapped with the paths,
// when the output directory is the input (through links too): writing it
// would replace the weights being read.
var ErrOutputIsInput = errors.New("the output is the input")

// checkNotInput refuses an output that is the input: the same file or
// directory once links are resolved.
func checkNotInput(in, out string) error {
	inSt, err := os.Stat(in)
	if err != nil {
		return nil // opening the input reports it
	}
	outSt, err := os.Stat(out)
	if err != nil {
		return nil // no output yet, or none that Stat can reach
	}
	if os.SameFile(inSt, outSt) {
		return fmt.Errorf("convert: %s and %s: %w", in, out, ErrOutputIsInput)
	}
	return nil
}

// checkOut fails early if out exists and may not be replaced.
func checkOut(out string, force bool) error {
	if _, err := os.Lstat(out); err == nil && !force {
		return fmt.Errorf("convert: %s: %w", out, ErrExists)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("convert: %w", err)
	} else if err == nil {
		return checkReplaceable(out)
	}
	return nil
}

// checkReplaceable fails unless out looks like a checkpoint this package
// (or a checkpoint tool) writes: a directory of plain files holding
// config.json and model.safetensors or its shards' index, and nothing
// below it.
func checkReplaceable(out string) error {
	st, err := os.Lstat(out)
	if err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("convert: %s is a file, %w: not replacing it", out, ErrNotOutput)
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	names := map[string]bool{}
	var listed []string
	for _, ent := range ents {
		if !ent.Type().IsRegular() {
			return fmt.Errorf("convert: %s holds %s, which is not a file: %w, not replacing it", out, ent.Name(), ErrNotOutput)
		}
		names[ent.Name()] = true
		if len(listed) < 3 {
			listed = append(listed, ent.Name())
		}
	}
	if names["config.json"] && (names["model.safetensors"] || names["model.safetensors.index.json"]) {
		return nil
	}
	found := "it is empty"
	if len(listed) > 0 {
		found = "it holds " + strings.Join(listed, ", ")
		if len(ents) > len(listed) {
			found += fmt.Sprintf(" and %d more", len(ents)-len(listed))
		}
	}
	return fmt.Errorf("convert: %s is %w (config.json with model.safetensors); %s: not replacing it", out, ErrNotOutput, found)
}

// checkpointFile reports whether a file of an output directory is one a
// conversion writes or that describes the checkpoint (config, weights,
// tokenizer): --force replaces these, and keeps every other file (a README,
// NOTES.md, LICENSE) of the directory it replaces.
func checkpointFile(name string) bool {
	switch name {
	case "config.json", "generation_config.json", "special_tokens_map.json", "added_tokens.json":
		return true
	}
	return strings.HasSuffix(name, ".safetensors") || strings.HasSuffix(name, ".safetensors.index.json") ||
		strings.HasPrefix(name, "tokenizer")
}

// keepOthers carries the files of the output being replaced that are not
// checkpoint files, and that the new output does not hold, into the new
// output dir: hard links where the file system allows, else copies.
func keepOthers(out, dir string) error {
	ents, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	for _, ent := range ents {
		name := ent.Name()
		if checkpointFile(name) {
			continue
		}
		dst := filepath.Join(dir, name)
		if _, err := os.Lstat(dst); err == nil {
			continue // the new output's own file (copied from the input)
		}
		if err := os.Link(filepath.Join(out, name), dst); err != nil {
			if err := copyFile(filepath.Join(out, name), dst); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeDir creates a temporary directory beside out, lets fill write into
// it, and renames it to out. An existing out is replaced only if force, and
// then only its checkpoint files: its other files are carried into the new
// output first (keepOthers). On any error the temporary directory is
// removed and out is untouched.
func writeDir(ctx context.Context, out string, force bool, fill func(dir string) error) (err error) {
	if err := checkOut(out, force); err != nil {
		return err
	}
	parent := filepath.Dir(filepath.Clean(out))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	if err := fill(tmp); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	if _, err := os.Lstat(out); err == nil {
		if !force {
			return fmt.Errorf("convert: %s appeared while writing: %w", out, ErrExists)
		}
		if err := checkReplaceable(out); err != nil {
			return err
		}
		if err := keepOthers(out, tmp); err != nil {
			return fmt.Errorf("convert: keeping the other files of %s: %w", out, err)
		}
		old := tmp + ".old"
		if err := os.Rename(out, old); err != nil {
			return fmt.Errorf("convert: %w", err)
		}
		if err := os.Rename(tmp, out); err != nil {
			os.Rename(old, out) // put it back
			return fmt.Errorf("convert: %w", err)
		}
		return os.RemoveAll(old)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	return nil
}
