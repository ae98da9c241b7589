package hub

// These tests pull from hubtest's stand-in hub (no network). Which real hub
// behaviours it imitates, and where they are documented, is in hubtest's
// package comment. In short:
//
//   - the revision and tree endpoints, GET /api/models/{repo}/revision/{rev}
//     and /tree/{rev}?recursive=true with Link pagination (huggingface_hub
//     hf_api.py: model_info, list_repo_tree);
//   - HEAD /{repo}/resolve/{rev}/{file}: X-Repo-Commit, X-Linked-Etag
//     (SHA-256), X-Linked-Size and a 302 to the content host for LFS files,
//     ETag (git blob SHA-1) for others (file_download.py:
//     get_hf_file_metadata; constants.py: HUGGINGFACE_HEADER_X_*);
//   - Range requests on the content host (file_download.py: http_get);
//   - 401/403 for gated repositories, 401 RepoNotFound without a token, 404
//     RevisionNotFound/EntryNotFound (utils/_http.py: hf_raise_for_status);
//   - the cache layout of "Manage huggingface_hub cache-system"
//     (docs/source/en/guides/manage-cache.md): models--owner--name/
//     {blobs/<etag>, snapshots/<commit>/<file> -> ../../blobs/<etag>,
//     refs/main}, partial downloads as blobs/<etag>.incomplete and locks in
//     .locks/models--owner--name/<etag>.lock (file_download.py:
//     hf_hub_download).

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/hub/hubtest"
)

// random returns n bytes of noise (fixed per seed).
func random(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// standIn serves a checkpoint repository, a GGUF repository with three
// quantizations (one in a folder) and a gated copy of the checkpoint.
func standIn(t *testing.T) (*hubtest.Server, map[string]*hubtest.Repo) {
	t.Helper()
	ckpt := &hubtest.Repo{Files: map[string][]byte{
		"config.json":               []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama"}`),
		"model.safetensors":         random(300_000, 1),
		"tokenizer.json":            []byte(`{"model":{"type":"BPE"}}`),
		"README.md":                 []byte("# a model\n"),
		"original/consolidated.bin": random(1000, 2),
	}}
	gguf := &hubtest.Repo{Files: map[string][]byte{
		"tiny-Q4_K_M.gguf":  random(200_000, 3),
		"tiny-Q8_0.gguf":    random(250_000, 4),
		"F16/tiny-F16.gguf": random(100_000, 5),
		"README.md":         []byte("# quants\n"),
	}}
	gated := &hubtest.Repo{Files: ckpt.Files, Gated: true}
	repos := map[string]*hubtest.Repo{"owner/ckpt": ckpt, "owner/tiny-GGUF": gguf, "owner/gated": gated}
	s := hubtest.New(repos)
	s.PageSize = 2 // the tree comes in pages
	s.Token = "hf_secretTOKEN123"
	t.Cleanup(s.Close)
	return s, repos
}

func newClient(t *testing.T, s *hubtest.Server) *Client {
	return &Client{Cache: t.TempDir(), Endpoint: s.URL()}
}

// captureLogs sends slog's default logger, at debug level, to a buffer for
// the test.
func captureLogs(t *testing.T) *syncBuffer {
	t.Helper()
	buf := &syncBuffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(old) })
	return buf
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// checkLayout checks that the cache holds repo's files at its commit in
// the hub's layout: refs/main names the commit, each file is a relative
// symlink to ../../blobs/<etag> (deeper for files in folders), the blob
// named by the SHA-256 of an LFS file or the git blob SHA-1 of another,
// with the same bytes; no partial download is left.
func checkLayout(t *testing.T, cache, name string, r *hubtest.Repo, files []string) {
	t.Helper()
	dir := filepath.Join(cache, "models--"+strings.ReplaceAll(name, "/", "--"))
	commit := hubtest.Commit(r)
	ref, err := os.ReadFile(filepath.Join(dir, "refs", "main"))
	if err != nil || string(ref) != commit {
		t.Fatalf("refs/main = %q, %v; want %s", ref, err, commit)
	}
	for _, f := range files {
		link := filepath.Join(dir, "snapshots", commit, f)
		target, err := os.Readlink(link)
		if err != nil {
			t.Fatalf("%s: not a symlink: %v", f, err)
		}
		etag := hubtest.GitBlobSHA1(r.Files[f])
		if hubtest.IsLFS(f) {
			etag = hubtest.SHA256(r.Files[f])
		}
		want := strings.Repeat("../", 2+strings.Count(f, "/")) + "blobs/" + etag
		if target != want {
			t.Errorf("%s -> %s, want %s", f, target, want)
		}
		got, err := os.ReadFile(link)
		if err != nil || !bytes.Equal(got, r.Files[f]) {
			t.Errorf("%s: the bytes differ from the hub's (%v)", f, err)
		}
	}
	blobs, _ := os.ReadDir(filepath.Join(dir, "blobs"))
	for _, b := range blobs {
		if strings.HasSuffix(b.Name(), ".incomplete") {
			t.Errorf("a partial download is left: %s", b.Name())
		}
	}
}

// nothingPlaced checks that a failed pull left no file to read a model
// from: no snapshot file and no ref.
func nothingPlaced(t *testing.T, cache, name string) {
	t.Helper()
	dir := filepath.Join(cache, "models--"+strings.ReplaceAll(name, "/", "--"))
	files, _ := snapshotFiles(filepath.Join(dir, "snapshots"))
	var weights []string
	for _, f := range files {
		if hubtest.IsLFS(f) {
			weights = append(weights, f)
		}
	}
	if len(weights) > 0 {
		t.Errorf("weights placed in a snapshot by a failed pull: %v", weights)
	}
	if _, err := os.Stat(filepath.Join(dir, "refs", "main")); err == nil {
		t.Errorf("refs/main written by a failed pull")
	}
}

func TestPullWritesTheHubLayout(t *testing.T) {
	s, repos := standIn(t)
	c := newClient(t, s)
	snap, err := c.Pull(context.Background(), Name{Repo: "owner/ckpt"}, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"config.json", "model.safetensors", "tokenizer.json"}
	if !slices.Equal(snap.Files, want) {
		t.Errorf("selected %v, want %v", snap.Files, want)
	}
	checkLayout(t, c.Cache, "owner/ckpt", repos["owner/ckpt"], want)
	if snap.Path() != snap.Dir {
		t.Errorf("a checkpoint's path is %s, want its snapshot %s", snap.Path(), snap.Dir)
	}
	// A GGUF in a folder links three levels up; the tag picks it.
	snap, err = c.Pull(context.Background(), Name{Repo: "owner/tiny-GGUF", Tag: "f16"}, "")
	if err != nil {
		t.Fatal(err)
	}
	checkLayout(t, c.Cache, "owner/tiny-GGUF", repos["owner/tiny-GGUF"], []string{"F16/tiny-F16.gguf"})
	if !strings.HasSuffix(snap.Path(), "F16/tiny-F16.gguf") {
		t.Errorf("path %s, want the GGUF file", snap.Path())
	}
	// A second pull downloads nothing.
	before := len(s.Requests())
	if _, err := c.Pull(context.Background(), Name{Repo: "owner/ckpt"}, ""); err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Requests()[before:] {
		if r.Host == "content" || r.Method == "GET" && strings.Contains(r.Path, "/resolve/") {
			t.Errorf("a pull of a cached model downloaded %s", r.Path)
		}
	}
}

// A renamed repository's old name still pulls, through the hub's
// redirects; the cache keeps the name the user gave.
func TestRenamedRepository(t *testing.T) {
	s, repos := standIn(t)
	s.Moved = map[string]string{"old/ckpt": "owner/ckpt"}
	c := newClient(t, s)
	if _, err := c.Pull(context.Background(), Name{Repo: "old/ckpt"}, ""); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, c.Cache, "old/ckpt", repos["owner/ckpt"], []string{"config.json", "model.safetensors"})
}

// A cache laid out by huggingface_hub (hf_hub_download) is read without a
// request.
func TestFindsACacheOtherToolsWrote(t *testing.T) {
	s, _ := standIn(t)
	cache := t.TempDir()
	commit := "0123456789abcdef0123456789abcdef01234567"
	dir := filepath.Join(cache, "models--someone--Model-GGUF")
	gguf := random(5000, 9)
	etag := hubtest.SHA256(gguf)
	write := func(name string, b []byte) {
		os.MkdirAll(filepath.Dir(name), 0o755)
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "blobs", etag), gguf)
	write(filepath.Join(dir, "refs", "main"), []byte(commit))
	os.MkdirAll(filepath.Join(dir, "snapshots", commit), 0o755)
	if err := os.Symlink("../../blobs/"+etag, filepath.Join(dir, "snapshots", commit, "model-Q8_0.gguf")); err != nil {
		t.Fatal(err)
	}
	c := &Client{Cache: cache, Endpoint: s.URL()}
	snap, err := c.Get(context.Background(), Name{Repo: "someone/Model-GGUF", Tag: "Q8_0"})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "snapshots", commit, "model-Q8_0.gguf"); snap.Path() != want {
		t.Errorf("path %s, want %s", snap.Path(), want)
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("%d requests for a cached model", n)
	}
	list, err := c.List()
	if err != nil || len(list) != 1 || list[0].Repo != "someone/Model-GGUF" || list[0].Size != 5000 || !slices.Equal(list[0].Refs, []string{"main"}) {
		t.Errorf("List = %+v, %v", list, err)
	}
}

func TestResumesAfterACutConnection(t *testing.T) {
	s, repos := standIn(t)
	c := newClient(t, s)
	s.SetFaults(hubtest.Faults{CutAt: 150_000, Cuts: 1})
	logs := captureLogs(t)
	if _, err := c.Pull(context.Background(), Name{Repo: "owner/ckpt"}, ""); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, c.Cache, "owner/ckpt", repos["owner/ckpt"], []string{"model.safetensors"})
	var ranges []string
	for _, r := range s.Requests() {
		if r.Host == "content" {
			ranges = append(ranges, r.Range)
		}
	}
	if !slices.Equal(ranges, []string{"", "bytes=150000-"}) {
		t.Errorf("content requests' ranges %q, want the whole file, then the rest from byte 150000", ranges)
	}
	if !strings.Contains(logs.String(), "continuing") {
		t.Errorf("the break was not logged:\n%s", logs)
	}
}

func TestCorruptBytesAreNotPlaced(t *testing.T) {
	s, _ := standIn(t)
	c := newClient(t, s)
	s.SetFaults(hubtest.Faults{Corrupt: true})
	_, err := c.Pull(context.Background(), Name{Repo: "owner/ckpt"}, "")
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("err = %v, want a checksum error", err)
	}
	nothingPlaced(t, c.Cache, "owner/ckpt")
	blobs, _ := os.ReadDir(filepath.Join(c.Cache, "models--owner--ckpt", "blobs"))
	for _, b := range blobs {
		if strings.HasSuffix(b.Name(), ".incomplete") || b.Name() == hubtest.SHA256(nil) {
			t.Errorf("left in blobs: %s", b.Name())
		}
	}
	// Fixed on the hub's side, the next pull works.
	s.SetFaults(hubtest.Faults{})
	if _, err := c.Pull(context.Background(), Name{Repo: "owner/ckpt"}, ""); err != nil {
		t.Fatal(err)
	}
}

func TestGatedRepositoryNeedsTheToken(t *testing.T) {
	s, repos := standIn(t)
	logs := captureLogs(t)
	c := newClient(t, s)
	_, err := c.Pull(context.Background(), Name{Repo: "owner/gated"}, "")
	if !errors.Is(err, ErrAccess) || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "HF_TOKEN") {
		t.Errorf("without a token: %v, want a 401 that names HF_TOKEN", err)
	}
	c.Token = "hf_wrong"
	_, err = c.Pull(context.Background(), Name{Repo: "owner/gated"}, "")
	if !errors.Is(err, ErrAccess) || !strings.Contains(err.Error(), "403") {
		t.Errorf("with a token without access: %v, want a 403", err)
	}
	nothingPlaced(t, c.Cache, "owner/gated")
	c.Token = s.Token
	s.SetFaults(hubtest.Faults{CutAt: 1000, Cuts: 1}) // a resume sends the token again
	if _, err := c.Pull(context.Background(), Name{Repo: "owner/gated"}, ""); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, c.Cache, "owner/gated", repos["owner/gated"], []string{"config.json", "model.safetensors"})
	for _, r := range s.Requests() {
		if r.Host == "content" && r.Auth != "" {
			t.Errorf("the token went to the content host: %+v", r)
		}
	}
	if strings.Contains(logs.String(), "secretTOKEN") {
		t.Errorf("the token is in the logs:\n%s", logs)
	}
}

func TestNotFound(t *testing.T) {
	s, _ := standIn(t)
	c := newClient(t, s)
	_, err := c.Pull(context.Background(), Name{Repo: "owner/ckpt"}, "no-such-branch")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "no such revision") {
		t.Errorf("unknown revision: %v", err)
	}
	// As the hub does, an unknown repository is a 401 to an anonymous
	// client (it may be private), a 404 to one with a token.
	_, err = c.Pull(context.Background(), Name{Repo: "owner/nothing"}, "")
	if !errors.Is(err, ErrAccess) || !strings.Contains(err.Error(), "no such repository") {
		t.Errorf("unknown repository, no token: %v", err)
	}
	c.Token = s.Token
	_, err = c.Pull(context.Background(), Name{Repo: "owner/nothing"}, "")
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown repository, a token: %v", err)
	}
	_, err = c.Pull(context.Background(), Name{Repo: "owner/tiny-GGUF", Tag: "Q2_K"}, "")
	if !errors.Is(err, ErrNoModel) || !strings.Contains(err.Error(), "Q4_K_M, Q8_0") {
		t.Errorf("unknown tag: %v, want the tags there are", err)
	}
}

// Ctrl-C during a slow download: the pull stops promptly, nothing is
// placed, and the next pull continues the partial file.
func TestCancelledPullResumes(t *testing.T) {
	s, repos := standIn(t)
	c := newClient(t, s)
	s.SetFaults(hubtest.Faults{Delay: 20 * time.Millisecond, ChunkSize: 10_000})
	ctx, cancel := context.WithCancel(context.Background())
	var reports int
	var cancelledAt time.Time
	c.Progress = func(p Progress) {
		reports++
		if p.File == "model.safetensors" && p.Done >= 30_000 && cancelledAt.IsZero() {
			cancelledAt = time.Now()
			cancel()
		}
	}
	_, err := c.Pull(ctx, Name{Repo: "owner/ckpt"}, "")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want cancelled", err)
	}
	if d := time.Since(cancelledAt); d > time.Second {
		t.Errorf("stopped %v after the cancel", d)
	}
	nothingPlaced(t, c.Cache, "owner/ckpt")
	partial := filepath.Join(c.Cache, "models--owner--ckpt", "blobs", hubtest.SHA256(repos["owner/ckpt"].Files["model.safetensors"])+".incomplete")
	st, err := os.Stat(partial)
	if err != nil || st.Size() < 30_000 {
		t.Fatalf("partial download: %v, %v", st, err)
	}
	s.SetFaults(hubtest.Faults{})
	c.Progress = nil
	if _, err := c.Pull(context.Background(), Name{Repo: "owner/ckpt"}, ""); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, c.Cache, "owner/ckpt", repos["owner/ckpt"], []string{"model.safetensors"})
	var last hubtest.Request
	for _, r := range s.Requests() {
		if r.Host == "content" {
			last = r
		}
	}
	if last.Range != "bytes="+strconv.FormatInt(st.Size(), 10)+"-" {
		t.Errorf("the second pull did not resume from byte %d: %+v", st.Size(), last)
	}
}

// failingWriter fails like a full disk after n bytes.
type failingWriter struct {
	w io.Writer
	n int
}

func (f *failingWriter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		k, _ := f.w.Write(p[:f.n])
		f.n = 0
		return k, syscall.ENOSPC
	}
	f.n -= len(p)
	return f.w.Write(p)
}

func TestDiskFull(t *testing.T) {
	s, repos := standIn(t)
	c := newClient(t, s)
	// Refused before it starts, naming the sizes.
	c.freeSpace = func(string) (int64, error) { return 1000, nil }
	_, err := c.Pull(context.Background(), Name{Repo: "owner/ckpt"}, "")
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "needs 300.1 kB") || !strings.Contains(err.Error(), "1.0 kB free") {
		t.Errorf("err = %v, want the sizes named", err)
	}
	for _, r := range s.Requests() {
		if r.Host == "content" {
			t.Errorf("downloaded although the disk cannot hold it")
		}
	}
	// Full during the download (the free space was wrong or went).
	c.freeSpace = nil
	c.wrapWrite = func(w io.Writer) io.Writer { return &failingWriter{w: w, n: 100_000} }
	_, err = c.Pull(context.Background(), Name{Repo: "owner/ckpt"}, "")
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("err = %v, want ENOSPC", err)
	}
	nothingPlaced(t, c.Cache, "owner/ckpt")
	// Space again: the pull continues.
	c.wrapWrite = nil
	if _, err := c.Pull(context.Background(), Name{Repo: "owner/ckpt"}, ""); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, c.Cache, "owner/ckpt", repos["owner/ckpt"], []string{"model.safetensors"})
}

// Two pulls of one file at once download it once and both succeed.
func TestConcurrentPullsTakeTurns(t *testing.T) {
	s, repos := standIn(t)
	cache := t.TempDir()
	s.SetFaults(hubtest.Faults{Delay: 2 * time.Millisecond, ChunkSize: 20_000})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &Client{Cache: cache, Endpoint: s.URL()}
			_, errs[i] = c.Pull(context.Background(), Name{Repo: "owner/ckpt"}, "")
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, cache, "owner/ckpt", repos["owner/ckpt"], []string{"model.safetensors"})
	n := 0
	for _, r := range s.Requests() {
		if r.Host == "content" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the file was downloaded %d times", n)
	}
}

func TestOffline(t *testing.T) {
	s, _ := standIn(t)
	c := newClient(t, s)
	c.Offline = true
	_, err := c.Get(context.Background(), Name{Repo: "owner/ckpt"})
	if !errors.Is(err, ErrNotCached) || !strings.Contains(err.Error(), "HF_HUB_OFFLINE") || !strings.Contains(err.Error(), "owner/ckpt") {
		t.Errorf("err = %v", err)
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("%d requests offline", n)
	}
	c.Offline = false
	if _, err := c.Pull(context.Background(), Name{Repo: "owner/ckpt"}, ""); err != nil {
		t.Fatal(err)
	}
	c.Offline = true
	if _, err := c.Get(context.Background(), Name{Repo: "owner/ckpt"}); err != nil {
		t.Errorf("offline, cached: %v", err)
	}
}

func TestRemove(t *testing.T) {
	s, _ := standIn(t)
	c := newClient(t, s)
	for _, tag := range []string{"Q4_K_M", "Q8_0"} {
		if _, err := c.Pull(context.Background(), Name{Repo: "owner/tiny-GGUF", Tag: tag}, ""); err != nil {
			t.Fatal(err)
		}
	}
	freed, err := c.Remove(Name{Repo: "owner/tiny-GGUF", Tag: "Q8_0"})
	if err != nil || freed != 250_000 {
		t.Errorf("Remove :Q8_0 freed %d, %v; want 250000", freed, err)
	}
	if _, err := c.Find(Name{Repo: "owner/tiny-GGUF", Tag: "Q4_K_M"}, ""); err != nil {
		t.Errorf("the other tag went too: %v", err)
	}
	if _, err := c.Find(Name{Repo: "owner/tiny-GGUF", Tag: "Q8_0"}, ""); !errors.Is(err, ErrNotCached) {
		t.Errorf("the removed tag is still found: %v", err)
	}
	if _, err := c.Remove(Name{Repo: "owner/tiny-GGUF"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(c.Cache, "models--owner--tiny-GGUF")); !os.IsNotExist(err) {
		t.Errorf("the repository's folder is left: %v", err)
	}
}

func TestSelect(t *testing.T) {
	ggufs := []string{"m-Q4_K_M.gguf", "m-Q8_0.gguf", "m.IQ3_XXS.gguf", "README.md"}
	for _, tc := range []struct {
		files []string
		tag   string
		want  []string
		err   string
	}{
		{ggufs, "", []string{"m-Q4_K_M.gguf"}, ""},
		{ggufs, "q8_0", []string{"m-Q8_0.gguf"}, ""},
		{ggufs, "IQ3_XXS", []string{"m.IQ3_XXS.gguf"}, ""},
		{ggufs[1:], "", nil, "name one with :TAG, one of Q8_0, IQ3_XXS"},
		{[]string{"stories260K.gguf"}, "", []string{"stories260K.gguf"}, ""},
		{[]string{"m-Q4_K_M-00001-of-00002.gguf", "m-Q4_K_M-00002-of-00002.gguf"}, "Q4_K_M", nil, "split into 2 files"},
		{[]string{"config.json", "model.safetensors", "tokenizer.model", "README.md"}, "", []string{"config.json", "model.safetensors", "tokenizer.model"}, ""},
		{[]string{"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "consolidated.safetensors", "tokenizer.json", "original/params.json"}, "",
			[]string{"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json"}, ""},
		{[]string{"config.json", "model.safetensors"}, "Q4_K_M", nil, "no .gguf file"},
		{[]string{"README.md"}, "", nil, "no .gguf file, and no config.json"},
	} {
		got, err := Select(tc.files, tc.tag)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Select(%v, %q) = %v, %v; want an error with %q", tc.files, tc.tag, got, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Select(%v, %q) = %v, %v; want %v", tc.files, tc.tag, got, err, tc.want)
		}
	}
}

func TestParseName(t *testing.T) {
	for s, want := range map[string]*Name{
		"bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M": {Repo: "bartowski/Llama-3.2-1B-Instruct-GGUF", Tag: "Q4_K_M"},
		"Qwen/Qwen2.5-0.5B-Instruct":                  {Repo: "Qwen/Qwen2.5-0.5B-Instruct"},
		"model.gguf":                                  nil,
		"./models/x":                                  nil,
		"/abs/path":                                   nil,
		"a/b/c":                                       nil,
		"models/stories260K.gguf":                     nil,
		"../x/y":                                      nil,
	} {
		got, ok := ParseName(s)
		if (want == nil) == ok || want != nil && got != *want {
			t.Errorf("ParseName(%q) = %+v, %v; want %+v", s, got, ok, want)
		}
	}
}
