package hub

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Name is what a user types for a model or head on the hub: REPO[:TAG],
// where REPO is owner/name and TAG picks a GGUF quantization by its usual
// name in the file names (Q4_K_M, Q8_0, F16, …).
type Name struct {
	Repo string // owner/name
	Tag  string // "" for the repository's default
}

func (n Name) String() string {
	if n.Tag == "" {
		return n.Repo
	}
	return n.Repo + ":" + n.Tag
}

// repoPart is what the hub allows in an owner or repository name.
var repoPart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ParseName reads s as REPO[:TAG]. ok is false when s cannot be a
// repository name (no slash, more than one, a part starting with a dot):
// the caller then takes it as a path.
func ParseName(s string) (n Name, ok bool) {
	repo, tag, _ := strings.Cut(s, ":")
	owner, name, found := strings.Cut(repo, "/")
	if !found || !repoPart.MatchString(owner) || !repoPart.MatchString(name) || strings.HasSuffix(name, ".gguf") {
		return Name{}, false
	}
	if strings.Contains(tag, "/") || strings.Contains(tag, ":") {
		return Name{}, false
	}
	return Name{Repo: repo, Tag: tag}, true
}

// folder is the repository's folder in the cache (huggingface_hub's
// repo_folder_name for a model): models--owner--name.
func folder(repo string) string {
	return "models--" + strings.ReplaceAll(repo, "/", "--")
}

// repoOfFolder inverts folder; ok is false for other folders (datasets,
// spaces, .locks).
func repoOfFolder(f string) (string, bool) {
	rest, ok := strings.CutPrefix(f, "models--")
	if !ok {
		return "", false
	}
	owner, name, ok := strings.Cut(rest, "--")
	if !ok {
		return rest, true // a repository without an owner (gpt2)
	}
	return owner + "/" + name, true
}

// quantPattern finds a quantization's name in a GGUF file name, as
// llama.cpp's converters and quantizers write it (…-Q4_K_M.gguf,
// ….IQ3_XXS.gguf, …-f16.gguf).
var quantPattern = regexp.MustCompile(`(?i)(?:^|[-._])((?:I?Q[0-9][A-Z0-9_]*?)|BF16|F16|F32)(?:[-.]|$)`)

// Quant is the quantization a GGUF file's name says, upper case, or "".
func Quant(file string) string {
	base := strings.TrimSuffix(path.Base(file), path.Ext(file))
	m := quantPattern.FindAllStringSubmatch(base, -1)
	if len(m) == 0 {
		return ""
	}
	return strings.ToUpper(m[len(m)-1][1])
}

// splitPart matches the parts of a split GGUF (…-00001-of-00003.gguf).
var splitPart = regexp.MustCompile(`-\d{5}-of-\d{5}\.gguf$`)

// defaultQuant is the quantization a GGUF repository gives without a tag
// when it has several, as llama.cpp's -hf does.
const defaultQuant = "Q4_K_M"

// checkpointExtras are the files of a checkpoint besides its weights.
var checkpointExtras = []string{
	"config.json", "generation_config.json", "tokenizer.json", "tokenizer.model",
	"tokenizer_config.json", "special_tokens_map.json", "model.safetensors.index.json",
}

// Select picks, from a repository's file paths, the files that make the
// model or head that tag names: the GGUF file of that quantization; or,
// without a tag, the repository's only GGUF (Q4_K_M among several), or a
// checkpoint's config, safetensors weights and tokenizer files (a draft
// head is a checkpoint without a tokenizer).
func Select(files []string, tag string) ([]string, error) {
	var ggufs []string
	top := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(strings.ToLower(f), ".gguf") {
			ggufs = append(ggufs, f)
		}
		if !strings.Contains(f, "/") {
			top[f] = true
		}
	}
	slices.Sort(ggufs)
	if tag != "" {
		if len(ggufs) == 0 {
			return nil, fmt.Errorf("%w: tag %s names a GGUF quantization, and the repository has no .gguf file", ErrNoModel, tag)
		}
		var match []string
		for _, f := range ggufs {
			if strings.EqualFold(Quant(f), tag) {
				match = append(match, f)
			}
		}
		return oneGGUF(match, ggufs, tag)
	}
	if top["config.json"] && (top["model.safetensors"] || top["model.safetensors.index.json"]) {
		var sel []string
		for _, f := range checkpointExtras {
			if top[f] {
				sel = append(sel, f)
			}
		}
		for f := range top {
			// With an index, the shards (model-00001-of-00004.safetensors);
			// a consolidated copy some repositories carry beside them is
			// not read.
			if strings.HasSuffix(f, ".safetensors") && strings.HasPrefix(f, "model") &&
				(f == "model.safetensors") != top["model.safetensors.index.json"] {
				sel = append(sel, f)
			}
		}
		slices.Sort(sel)
		return sel, nil
	}
	switch len(ggufs) {
	case 0:
		return nil, fmt.Errorf("%w: no .gguf file, and no config.json with model.safetensors", ErrNoModel)
	case 1:
		return ggufs, nil
	}
	var match []string
	for _, f := range ggufs {
		if Quant(f) == defaultQuant {
			match = append(match, f)
		}
	}
	if len(match) == 0 {
		return nil, fmt.Errorf("%w: %d GGUF files; name one with :TAG, one of %s", ErrNoModel, len(ggufs), strings.Join(quants(ggufs), ", "))
	}
	return oneGGUF(match, ggufs, defaultQuant)
}

// oneGGUF returns the single file of match, or says why there is none.
func oneGGUF(match, all []string, tag string) ([]string, error) {
	switch {
	case len(match) == 0:
		return nil, fmt.Errorf("%w: no GGUF file of quantization %s; the repository has %s", ErrNoModel, tag, strings.Join(quants(all), ", "))
	case len(match) > 1 && splitPart.MatchString(match[0]):
		return nil, fmt.Errorf("%w: %s is split into %d files (%s, …), and redrafter reads single-file GGUFs: merge it with llama.cpp's gguf-split --merge", ErrNoModel, tag, len(match), match[0])
	case len(match) > 1:
		return nil, fmt.Errorf("%w: %d GGUF files are %s (%s): the tag is ambiguous", ErrNoModel, len(match), tag, strings.Join(match, ", "))
	}
	return match, nil
}

// quants lists the quantizations among GGUF files, for error messages.
func quants(ggufs []string) []string {
	var q []string
	for _, f := range ggufs {
		name := Quant(f)
		if name == "" {
			name = f
		}
		if !slices.Contains(q, name) {
			q = append(q, name)
		}
	}
	return q
}
