// Package hubtest is a stand-in for the Hugging Face Hub, for tests: an
// httptest server speaking the subset of the hub's HTTP API that package
// hub uses, with a second server as the content host LFS files redirect
// to, and faults a test can inject. Tests only; nothing that ships imports
// it.
//
// The real behaviours it imitates, and where they are documented or seen:
//
//   - GET /api/models/{repo}/revision/{rev} answers JSON with the commit
//     ("sha") and the files ("siblings"): huggingface_hub's HfApi.model_info
//     (hf_api.py) calls it; the hub's OpenAPI at /docs/hub/api.
//   - GET /api/models/{repo}/tree/{rev}?recursive=true answers a JSON list
//     of {type, oid, size, path, lfs: {oid, size, pointerSize}}, paginated
//     by a Link header with rel="next": HfApi.list_repo_tree, and its
//     paginate() helper that follows Link (utils/_pagination.py).
//   - HEAD {endpoint}/{repo}/resolve/{rev}/{file}: a regular file answers 200
//     with ETag (the git blob SHA-1, quoted) and Content-Length; an LFS file
//     answers 302 to its content host with X-Linked-Etag (the SHA-256),
//     X-Linked-Size and ETag; both carry X-Repo-Commit. huggingface_hub's
//     get_hf_file_metadata (file_download.py) reads exactly these headers,
//     HEADs without following the redirect and drops the Authorization
//     header for the content host; the constants are HUGGINGFACE_HEADER_X_*
//     in constants.py.
//   - A renamed repository's old name answers 307 with a relative Location
//     to the new one (file_download.py follows relative redirects only:
//     _request_wrapper's follow_relative_redirects).
//   - GET of the same address serves the bytes (regular files) or the same
//     302 (LFS); the content host serves Range requests with 206 (the
//     downloader's resume, http_get's Range header in file_download.py).
//   - A gated or private repository answers 401 without a token and 403 for
//     a token without access, with X-Error-Code / X-Error-Message headers
//     (utils/_http.py, hf_raise_for_status: GatedRepo, RepoNotFound); an
//     unknown repository answers 401 RepoNotFound without a token and 404
//     with one; an unknown revision 404 RevisionNotFound, a missing file 404
//     EntryNotFound.
//   - The cache layout the client writes is the one "Manage huggingface_hub
//     cache-system" (docs/source/en/guides/manage-cache.md) describes; the
//     tests of package hub check it.
package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Repo is a repository the stand-in serves.
type Repo struct {
	Files map[string][]byte
	Gated bool // needs the server's Token (401 without, 403 with another)
}

// Faults change how the content host serves LFS files.
type Faults struct {
	// CutAt cuts the connection after this many bytes of a download's body
	// (0: never), for the next Cuts downloads.
	CutAt int64
	Cuts  int
	// Corrupt flips one byte of every LFS download.
	Corrupt bool
	// Delay sleeps between chunks of ChunkSize bytes (default 4 KiB).
	Delay     time.Duration
	ChunkSize int
}

// Request is one request either server saw.
type Request struct {
	Host   string // "hub" or "content"
	Method string
	Path   string
	Range  string
	Auth   string // the Authorization header
}

// Server is the stand-in hub (its URL is the endpoint) and its content
// host.
type Server struct {
	Hub, Content *httptest.Server
	Token        string // the token gated repositories accept
	PageSize     int    // tree entries per page (default 1000)
	// Moved maps an old repository name to its new one: requests for it
	// are redirected (307, a relative Location), as the hub does for a
	// renamed repository.
	Moved map[string]string

	mu       sync.Mutex
	repos    map[string]*Repo
	faults   Faults
	requests []Request
}

// New starts a stand-in with repos; close it with Close.
func New(repos map[string]*Repo) *Server {
	s := &Server{repos: repos, PageSize: 1000}
	s.Content = httptest.NewServer(http.HandlerFunc(s.serveContent))
	s.Hub = httptest.NewServer(http.HandlerFunc(s.serveHub))
	return s
}

// URL is the endpoint (HF_ENDPOINT).
func (s *Server) URL() string { return s.Hub.URL }

func (s *Server) Close() { s.Hub.Close(); s.Content.Close() }

// SetFaults replaces the faults.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
}

// Requests returns the requests seen so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

func (s *Server) log(host string, r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, Request{host, r.Method, r.URL.Path, r.Header.Get("Range"), r.Header.Get("Authorization")})
	s.mu.Unlock()
}

// Commit is the commit hash the stand-in gives a repository's main: a
// hash of its files, so that changing them makes a new commit.
func Commit(r *Repo) string {
	h := sha1.New()
	names := make([]string, 0, len(r.Files))
	for n := range r.Files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%x\x00", n, sha256.Sum256(r.Files[n]))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// IsLFS says which files the stand-in stores in LFS: weights, as the
// hub's default .gitattributes does for *.gguf, *.safetensors and *.bin.
func IsLFS(name string) bool {
	switch path.Ext(name) {
	case ".gguf", ".safetensors", ".bin":
		return true
	}
	return false
}

// GitBlobSHA1 is git's object id of a file's bytes: the ETag of a file
// that is not in LFS.
func GitBlobSHA1(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// SHA256 is an LFS file's ETag.
func SHA256(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func hubError(w http.ResponseWriter, code int, errCode, msg string) {
	w.Header().Set("X-Error-Code", errCode)
	w.Header().Set("X-Error-Message", msg)
	http.Error(w, msg, code)
}

// lookup finds the repository of a request and checks its token; ok is
// false when it has answered with an error.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, repo string) (*Repo, bool) {
	s.mu.Lock()
	rp := s.repos[repo]
	s.mu.Unlock()
	auth := r.Header.Get("Authorization")
	switch {
	case rp == nil && auth == "":
		hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository not found")
		return nil, false
	case rp == nil:
		hubError(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return nil, false
	case rp.Gated && auth == "":
		hubError(w, http.StatusUnauthorized, "GatedRepo", "Access to model "+repo+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
		return nil, false
	case rp.Gated && auth != "Bearer "+s.Token:
		hubError(w, http.StatusForbidden, "GatedRepo", "Access to model "+repo+" is restricted and you are not in the authorized list.")
		return nil, false
	}
	return rp, true
}

func (s *Server) serveHub(w http.ResponseWriter, r *http.Request) {
	s.log("hub", r)
	p := r.URL.Path
	for old, repo := range s.Moved {
		for _, prefix := range []string{"/api/models/", "/"} {
			if rest, ok := strings.CutPrefix(p, prefix+old+"/"); ok {
				w.Header().Set("Location", prefix+repo+"/"+rest)
				w.WriteHeader(http.StatusTemporaryRedirect)
				return
			}
		}
	}
	if rest, ok := strings.CutPrefix(p, "/api/models/"); ok {
		parts := strings.SplitN(rest, "/", 4) // owner, name, revision|tree, rev
		if len(parts) != 4 {
			http.NotFound(w, r)
			return
		}
		repo := parts[0] + "/" + parts[1]
		rp, ok := s.lookup(w, r, repo)
		if !ok {
			return
		}
		commit := Commit(rp)
		if parts[3] != "main" && parts[3] != commit {
			hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+parts[3])
			return
		}
		switch parts[2] {
		case "revision":
			var sib []map[string]string
			for _, n := range sortedNames(rp) {
				sib = append(sib, map[string]string{"rfilename": n})
			}
			writeJSON(w, map[string]any{"id": repo, "sha": commit, "siblings": sib})
		case "tree":
			s.serveTree(w, r, rp)
		default:
			http.NotFound(w, r)
		}
		return
	}
	// /{owner}/{name}/resolve/{rev}/{file...}
	parts := strings.SplitN(strings.TrimPrefix(p, "/"), "/", 5)
	if len(parts) != 5 || parts[2] != "resolve" {
		http.NotFound(w, r)
		return
	}
	repo := parts[0] + "/" + parts[1]
	rp, ok := s.lookup(w, r, repo)
	if !ok {
		return
	}
	commit := Commit(rp)
	if parts[3] != "main" && parts[3] != commit {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+parts[3])
		return
	}
	b, found := rp.Files[parts[4]]
	if !found {
		hubError(w, http.StatusNotFound, "EntryNotFound", parts[4]+" does not exist on \""+parts[3]+"\"")
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	if IsLFS(parts[4]) {
		sum := SHA256(b)
		w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(b)))
		w.Header().Set("ETag", `"`+sum+`"`)
		w.Header().Set("Location", s.Content.URL+"/"+sum)
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+GitBlobSHA1(b)+`"`)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	if r.Method == http.MethodHead {
		return
	}
	w.Write(b)
}

func (s *Server) serveTree(w http.ResponseWriter, r *http.Request, rp *Repo) {
	type lfs struct {
		Oid         string `json:"oid"`
		Size        int    `json:"size"`
		PointerSize int    `json:"pointerSize"`
	}
	type entry struct {
		Type string `json:"type"`
		Oid  string `json:"oid"`
		Size int    `json:"size"`
		Path string `json:"path"`
		LFS  *lfs   `json:"lfs,omitempty"`
	}
	var all []entry
	for _, n := range sortedNames(rp) {
		b := rp.Files[n]
		e := entry{Type: "file", Oid: GitBlobSHA1(b), Size: len(b), Path: n}
		if IsLFS(n) {
			// The git blob of an LFS file is its pointer; size is the file's.
			e.LFS = &lfs{Oid: SHA256(b), Size: len(b), PointerSize: 134}
		}
		all = append(all, e)
	}
	start, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
	end := min(start+s.PageSize, len(all))
	if end < len(all) {
		q := r.URL.Query()
		q.Set("cursor", strconv.Itoa(end))
		w.Header().Set("Link", fmt.Sprintf(`<%s%s?%s>; rel="next"`, s.Hub.URL, r.URL.Path, q.Encode()))
	}
	writeJSON(w, all[start:end])
}

func sortedNames(rp *Repo) []string {
	var names []string
	for n := range rp.Files {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// serveContent is the content host: /<sha256> with Range support.
func (s *Server) serveContent(w http.ResponseWriter, r *http.Request) {
	s.log("content", r)
	sum := strings.TrimPrefix(r.URL.Path, "/")
	var data []byte
	s.mu.Lock()
	for _, rp := range s.repos {
		for _, b := range rp.Files {
			if SHA256(b) == sum {
				data = b
			}
		}
	}
	f := s.faults
	cut := f.Cuts > 0 && f.CutAt > 0
	if cut {
		s.faults.Cuts--
	}
	s.mu.Unlock()
	if data == nil {
		http.NotFound(w, r)
		return
	}
	from := 0
	if rg := r.Header.Get("Range"); rg != "" {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rg, "bytes="), "-"))
		if err != nil || n < 0 || !strings.HasSuffix(rg, "-") {
			http.Error(w, "only bytes=N- ranges", http.StatusBadRequest)
			return
		}
		if n >= len(data) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		from = n
	}
	body := slices.Clone(data[from:])
	if f.Corrupt && len(body) > 0 {
		body[len(body)/2] ^= 0xff
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Accept-Ranges", "bytes")
	if from > 0 {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, len(data)-1, len(data)))
		w.WriteHeader(http.StatusPartialContent)
	}
	if r.Method == http.MethodHead {
		return
	}
	chunk := f.ChunkSize
	if chunk <= 0 {
		chunk = 4 << 10
	}
	sent := int64(0)
	for off := 0; off < len(body); off += chunk {
		part := body[off:min(off+chunk, len(body))]
		if cut && sent+int64(len(part)) > f.CutAt {
			w.Write(part[:f.CutAt-sent])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection drops mid-body
		}
		if _, err := w.Write(part); err != nil {
			return
		}
		sent += int64(len(part))
		if f.Delay > 0 {
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(f.Delay):
			}
		}
	}
}
