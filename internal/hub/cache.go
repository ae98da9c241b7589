package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Errors a caller can tell apart with errors.Is.
var (
	// ErrNotCached: the model is not in the cache, or not whole (offline,
	// or Find).
	ErrNotCached = errors.New("not in the cache")
	// ErrNoModel: the repository has no files that make a model of that tag.
	ErrNoModel = errors.New("no model files")
	// ErrNotFound: the hub has no such repository, revision or file (404).
	ErrNotFound = errors.New("not found on the hub")
	// ErrAccess: the hub wants a token, or one with access (401, 403).
	ErrAccess = errors.New("access denied")
	// ErrChecksum: a downloaded file's bytes are not the ones the hub names.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrNoSpace: the disk cannot hold the download.
	ErrNoSpace = errors.New("not enough disk space")
)

// Snapshot is a model or head in the cache: the files a name selects in
// one snapshot of its repository, all present.
type Snapshot struct {
	Repo   string   // owner/name
	Tag    string   // as given, "" for the default
	Commit string   // the snapshot's commit
	Dir    string   // <cache>/models--owner--name/snapshots/<commit>
	Files  []string // the selected files, relative to Dir
}

// Path is what to load: the GGUF file, or the snapshot directory of a
// checkpoint or head.
func (s *Snapshot) Path() string {
	if len(s.Files) == 1 && strings.HasSuffix(strings.ToLower(s.Files[0]), ".gguf") {
		return filepath.Join(s.Dir, filepath.FromSlash(s.Files[0]))
	}
	return s.Dir
}

// repoDir is the repository's folder in cache.
func repoDir(cache, repo string) string { return filepath.Join(cache, folder(repo)) }

// isCommit reports whether rev is a full commit hash.
func isCommit(rev string) bool {
	return len(rev) == 40 && strings.Trim(rev, "0123456789abcdef") == ""
}

// snapshotCommit is the commit a revision names in the cache: the revision
// itself when it is a commit, else refs/<revision>; without that ref, the
// only snapshot there is (a tool that downloaded by commit writes no ref).
func snapshotCommit(dir, revision string) (string, error) {
	if isCommit(revision) {
		return revision, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "refs", filepath.FromSlash(revision)))
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	snaps, _ := os.ReadDir(filepath.Join(dir, "snapshots"))
	if len(snaps) == 1 && revision == DefaultRevision {
		return snaps[0].Name(), nil
	}
	return "", fmt.Errorf("%w: no refs/%s in %s", ErrNotCached, revision, dir)
}

// snapshotFiles lists the files of a snapshot whose links resolve (a link
// to a missing blob is a file another tool has not finished or removed).
func snapshotFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	slices.Sort(files)
	return files, err
}

// find looks name up in the cache at revision.
func find(cache string, name Name, revision string) (*Snapshot, error) {
	dir := repoDir(cache, name.Repo)
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("%w: %s (no %s)", ErrNotCached, name, dir)
	}
	commit, err := snapshotCommit(dir, revision)
	if err != nil {
		return nil, err
	}
	snap := filepath.Join(dir, "snapshots", commit)
	files, err := snapshotFiles(snap)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNotCached, name, err)
	}
	sel, err := Select(files, name.Tag)
	if err != nil {
		return nil, fmt.Errorf("%w: %s at %s: %v", ErrNotCached, name, snap, err)
	}
	if missing := missingShards(snap, sel); len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s at %s: missing %s", ErrNotCached, name, snap, strings.Join(missing, ", "))
	}
	return &Snapshot{Repo: name.Repo, Tag: name.Tag, Commit: commit, Dir: snap, Files: sel}, nil
}

// missingShards lists the shards a checkpoint's index names that are not
// in its snapshot.
func missingShards(snap string, sel []string) []string {
	if !slices.Contains(sel, "model.safetensors.index.json") {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(snap, "model.safetensors.index.json"))
	if err != nil {
		return []string{"model.safetensors.index.json"}
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if json.Unmarshal(b, &idx) != nil {
		return nil // the loader names what is wrong with it
	}
	var missing []string
	for _, f := range idx.WeightMap {
		if _, err := os.Stat(filepath.Join(snap, f)); err != nil && !slices.Contains(missing, f) {
			missing = append(missing, f)
		}
	}
	slices.Sort(missing)
	return missing
}

// RepoOf returns the repository a path in the cache belongs to: for
// <cache>/models--owner--name/snapshots/<commit>/…, owner/name.
func RepoOf(cache, path string) (string, bool) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", false
	}
	root, err := filepath.Abs(cache)
	if err != nil {
		return "", false
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", false
	}
	parts := strings.Split(filepath.ToSlash(rel), "/")
	if len(parts) < 3 || parts[1] != "snapshots" {
		return "", false
	}
	return repoOfFolder(parts[0])
}
