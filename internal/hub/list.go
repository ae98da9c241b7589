package hub

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Cached is one snapshot of a repository in the cache.
type Cached struct {
	Repo   string
	Refs   []string // the branches that point at it
	Commit string
	Dir    string
	Files  []string // every file present, relative to Dir
	Size   int64    // their bytes (each blob once)
	// BaseModels is what a draft head's config.json declares it drafts for
	// (base_model_name_or_path, or base_model); empty for a model.
	BaseModels []string
}

// List returns every model snapshot in the cache, by repository then
// commit.
func (c *Client) List() ([]Cached, error) {
	entries, err := os.ReadDir(c.Cache)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Cached
	for _, e := range entries {
		repo, ok := repoOfFolder(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		dir := filepath.Join(c.Cache, e.Name())
		refs := map[string][]string{}
		filepath.WalkDir(filepath.Join(dir, "refs"), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(p)
			if err == nil {
				rel, _ := filepath.Rel(filepath.Join(dir, "refs"), p)
				commit := strings.TrimSpace(string(b))
				refs[commit] = append(refs[commit], filepath.ToSlash(rel))
			}
			return nil
		})
		snaps, _ := os.ReadDir(filepath.Join(dir, "snapshots"))
		for _, s := range snaps {
			snap := filepath.Join(dir, "snapshots", s.Name())
			files, _ := snapshotFiles(snap)
			if len(files) == 0 {
				continue
			}
			cd := Cached{Repo: repo, Refs: refs[s.Name()], Commit: s.Name(), Dir: snap, Files: files}
			seen := map[string]bool{}
			for _, f := range files {
				p := filepath.Join(snap, filepath.FromSlash(f))
				target, _ := filepath.EvalSymlinks(p)
				if st, err := os.Stat(p); err == nil && !seen[target] {
					seen[target] = true
					cd.Size += st.Size()
				}
			}
			cd.BaseModels = baseModels(filepath.Join(snap, "config.json"))
			out = append(out, cd)
		}
	}
	return out, nil
}

// baseModels reads the models a draft head's config.json says it drafts
// for. A head declares it as Medusa heads and PEFT adapters do
// (base_model_name_or_path), or as a model card's base_model (a name or a
// list); a model's own config declares neither, or itself in the former
// (transformers writes _name_or_path, which is not read).
func baseModels(config string) []string {
	b, err := os.ReadFile(config)
	if err != nil {
		return nil
	}
	var cfg struct {
		BaseModelNameOrPath string          `json:"base_model_name_or_path"`
		BaseModel           json.RawMessage `json:"base_model"`
		ModelType           string          `json:"model_type"`
	}
	if json.Unmarshal(b, &cfg) != nil {
		return nil
	}
	var out []string
	if cfg.BaseModelNameOrPath != "" {
		out = append(out, cfg.BaseModelNameOrPath)
	}
	var one string
	var many []string
	if json.Unmarshal(cfg.BaseModel, &one) == nil && one != "" {
		out = append(out, one)
	} else if json.Unmarshal(cfg.BaseModel, &many) == nil {
		out = append(out, many...)
	}
	return out
}

// HeadsFor returns the cached draft heads whose config declares repo as
// their base model (compared without case, as the hub compares names).
func HeadsFor(all []Cached, repo string) []Cached {
	var heads []Cached
	for _, c := range all {
		for _, b := range c.BaseModels {
			if strings.EqualFold(b, repo) && !strings.EqualFold(c.Repo, repo) {
				heads = append(heads, c)
				break
			}
		}
	}
	return heads
}

// Remove deletes name from the cache: with a tag, the files that tag
// selects from every snapshot; without, every snapshot and ref. Blobs no
// remaining link uses go with them, and the repository's folder when
// nothing is left. It returns the bytes freed.
func (c *Client) Remove(name Name) (int64, error) {
	dir := repoDir(c.Cache, name.Repo)
	if _, err := os.Stat(dir); err != nil {
		return 0, fmt.Errorf("%w: %s (no %s)", ErrNotCached, name, dir)
	}
	snaps, _ := os.ReadDir(filepath.Join(dir, "snapshots"))
	removedAny := false
	for _, s := range snaps {
		snap := filepath.Join(dir, "snapshots", s.Name())
		if name.Tag == "" {
			if err := os.RemoveAll(snap); err != nil {
				return 0, err
			}
			removedAny = true
			continue
		}
		files, _ := snapshotFiles(snap)
		sel, err := Select(files, name.Tag)
		if err != nil {
			continue
		}
		for _, f := range sel {
			if err := os.Remove(filepath.Join(snap, filepath.FromSlash(f))); err != nil {
				return 0, err
			}
			removedAny = true
		}
	}
	if !removedAny {
		return 0, fmt.Errorf("%w: %s: no snapshot has files of that tag", ErrNotCached, name)
	}
	freed, err := collect(dir)
	if err != nil {
		return freed, err
	}
	return freed, nil
}

// collect removes the blobs (and partial downloads) of a repository's
// folder that no snapshot links to, then empty snapshots, and the folder
// itself when no snapshot is left.
func collect(dir string) (int64, error) {
	used := map[string]bool{}
	snapsDir := filepath.Join(dir, "snapshots")
	filepath.WalkDir(snapsDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSymlink != 0 {
			if t, err := os.Readlink(p); err == nil {
				used[filepath.Base(t)] = true
			}
		}
		return nil
	})
	var freed int64
	blobs, _ := os.ReadDir(filepath.Join(dir, "blobs"))
	for _, b := range blobs {
		if used[strings.TrimSuffix(b.Name(), ".incomplete")] && !strings.HasSuffix(b.Name(), ".incomplete") {
			continue
		}
		if info, err := b.Info(); err == nil {
			freed += info.Size()
		}
		if err := os.Remove(filepath.Join(dir, "blobs", b.Name())); err != nil {
			return freed, err
		}
	}
	// Empty snapshot folders, deepest first.
	var dirs []string
	filepath.WalkDir(snapsDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != snapsDir {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	for _, d := range dirs {
		os.Remove(d) // fails, harmlessly, when not empty
	}
	if left, _ := os.ReadDir(snapsDir); len(left) == 0 {
		return freed, os.RemoveAll(dir)
	}
	return freed, nil
}
