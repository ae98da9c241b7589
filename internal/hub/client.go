package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DefaultEndpoint is the hub's address when HF_ENDPOINT does not name a
// mirror.
const DefaultEndpoint = "https://huggingface.co"

// DefaultRevision is the branch a pull takes when none is given.
const DefaultRevision = "main"

// retries is how many times one file's download continues after a
// connection breaks, before the pull gives up (a later pull resumes).
const retries = 5

// Client pulls from one hub into one cache.
type Client struct {
	Cache    string // the hub cache directory ($HF_HUB_CACHE)
	Endpoint string // the hub's address ("" for DefaultEndpoint)
	Token    string // sent to the endpoint only, never to a content host, never logged
	Offline  bool   // never use the network: only what the cache holds
	HTTP     *http.Client
	// Progress, if set, is called as bytes arrive (often: throttle it).
	Progress func(Progress)

	// Faults the tests inject.
	freeSpace func(dir string) (int64, error) // default: the file system's
	wrapWrite func(w io.Writer) io.Writer     // around each download's file
}

// Progress is the state of a pull.
type Progress struct {
	File        string // the file downloading
	Done, Total int64  // its bytes
	AllDone     int64  // bytes of every file of the pull
	AllTotal    int64
}

func (c *Client) endpoint() string {
	if c.Endpoint == "" {
		return DefaultEndpoint
	}
	return strings.TrimRight(c.Endpoint, "/")
}

// defaultHTTP is the client when Client.HTTP is nil: the default transport
// (proxies from the environment), with a bound on a server that accepts a
// request and never answers.
var defaultHTTP = func() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = time.Minute
	return &http.Client{Transport: t}
}()

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return defaultHTTP
}

// Find returns name in the cache at revision ("" for main), without the
// network; the error is ErrNotCached when it is not there whole.
func (c *Client) Find(name Name, revision string) (*Snapshot, error) {
	if revision == "" {
		revision = DefaultRevision
	}
	return find(c.Cache, name, revision)
}

// Get returns name from the cache, pulling it first when it is not there
// (offline: ErrNotCached naming what is missing).
func (c *Client) Get(ctx context.Context, name Name) (*Snapshot, error) {
	s, err := c.Find(name, "")
	if err == nil {
		return s, nil
	}
	if c.Offline {
		return nil, fmt.Errorf("offline (HF_HUB_OFFLINE=1), and %w", err)
	}
	return c.Pull(ctx, name, "")
}

// repoFile is one file of a repository's tree.
type repoFile struct {
	Type string `json:"type"`
	Path string `json:"path"`
	Size int64  `json:"size"`
	Oid  string `json:"oid"` // git blob SHA-1
	LFS  *struct {
		Oid  string `json:"oid"` // SHA-256
		Size int64  `json:"size"`
	} `json:"lfs"`
}

// Pull downloads what name selects at revision ("" for main) into the
// cache and returns it. Files already in the cache are not downloaded
// again; a partial download is continued.
func (c *Client) Pull(ctx context.Context, name Name, revision string) (*Snapshot, error) {
	if revision == "" {
		revision = DefaultRevision
	}
	if c.Offline {
		if s, err := c.Find(name, revision); err == nil {
			return s, nil
		} else {
			return nil, fmt.Errorf("offline (HF_HUB_OFFLINE=1), and %w", err)
		}
	}
	commit, err := c.commit(ctx, name.Repo, revision)
	if err != nil {
		return nil, err
	}
	tree, err := c.tree(ctx, name.Repo, commit)
	if err != nil {
		return nil, err
	}
	paths := make([]string, 0, len(tree))
	byPath := map[string]repoFile{}
	for _, f := range tree {
		if f.Type == "file" {
			paths = append(paths, f.Path)
			byPath[f.Path] = f
		}
	}
	sel, err := Select(paths, name.Tag)
	if err != nil {
		return nil, fmt.Errorf("%s at %s: %w", name, short(commit), err)
	}
	dir := repoDir(c.Cache, name.Repo)
	if err := c.checkSpace(dir, sel, byPath); err != nil {
		return nil, fmt.Errorf("pull %s: %w", name, err)
	}
	snap := filepath.Join(dir, "snapshots", commit)
	p := Progress{}
	for _, f := range sel {
		p.AllTotal += byPath[f].size()
	}
	for _, f := range sel {
		if err := c.pullFile(ctx, name.Repo, commit, f, byPath[f].size(), &p); err != nil {
			return nil, err
		}
	}
	// The ref last: until every file is in place, the name still resolves
	// to what it did before the pull.
	if !isCommit(revision) {
		if err := writeAtomic(filepath.Join(dir, "refs", filepath.FromSlash(revision)), []byte(commit)); err != nil {
			return nil, err
		}
	}
	return &Snapshot{Repo: name.Repo, Tag: name.Tag, Commit: commit, Dir: snap, Files: sel}, nil
}

func (f repoFile) size() int64 {
	if f.LFS != nil {
		return f.LFS.Size
	}
	return f.Size
}

// commit resolves revision with GET /api/models/{repo}/revision/{revision}.
func (c *Client) commit(ctx context.Context, repo, revision string) (string, error) {
	var info struct {
		Sha string `json:"sha"`
	}
	u := c.endpoint() + "/api/models/" + repo + "/revision/" + url.PathEscape(revision)
	if err := c.getJSON(ctx, repo, u, &info, nil); err != nil {
		return "", err
	}
	if !isCommit(info.Sha) {
		return "", fmt.Errorf("%s: the hub's revision %s has no commit hash (sha %q)", repo, revision, info.Sha)
	}
	return info.Sha, nil
}

// tree lists the repository's files at commit with GET
// /api/models/{repo}/tree/{commit}?recursive=true, following the Link
// header's next pages.
func (c *Client) tree(ctx context.Context, repo, commit string) ([]repoFile, error) {
	var all []repoFile
	next := c.endpoint() + "/api/models/" + repo + "/tree/" + commit + "?recursive=true"
	for next != "" {
		var page []repoFile
		var h http.Header
		if err := c.getJSON(ctx, repo, next, &page, &h); err != nil {
			return nil, err
		}
		all = append(all, page...)
		next = nextLink(h.Get("Link"))
	}
	return all, nil
}

// nextLink reads the rel="next" address of a Link header.
func nextLink(h string) string {
	for _, part := range strings.Split(h, ",") {
		u, params, ok := strings.Cut(part, ";")
		if ok && strings.Contains(params, `rel="next"`) {
			return strings.Trim(strings.TrimSpace(u), "<>")
		}
	}
	return ""
}

func (c *Client) getJSON(ctx context.Context, repo, u string, v any, h *http.Header) error {
	req, err := c.request(ctx, http.MethodGet, u)
	if err != nil {
		return err
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", repo, err)
	}
	defer resp.Body.Close()
	if err := c.statusErr(repo, "", resp); err != nil {
		return err
	}
	if h != nil {
		*h = resp.Header
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s: reading the hub's answer from %s: %w", repo, u, err)
	}
	return nil
}

// request makes a request, with the token when it goes to the endpoint.
func (c *Client) request(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "redrafter")
	if c.Token != "" && sameOrigin(u, c.endpoint()) {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	return req, nil
}

// sameOrigin reports whether a and b have the same scheme, host and port.
func sameOrigin(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && ua.Scheme == ub.Scheme && ua.Host == ub.Host
}

// statusErr turns the hub's error answers into errors that say what to do;
// file is "" for the repository's API.
func (c *Client) statusErr(repo, file string, resp *http.Response) error {
	if resp.StatusCode < 400 {
		return nil
	}
	what := repo
	if file != "" {
		what = repo + ": " + file
	}
	msg := resp.Header.Get("X-Error-Message")
	if msg != "" {
		msg = " (" + msg + ")"
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		if resp.Header.Get("X-Error-Code") == "RepoNotFound" {
			return fmt.Errorf("%s: %w: the hub answered 401%s: no such repository, or it is private: check the name, or set HF_TOKEN to a token with access", what, ErrAccess, msg)
		}
		if c.Token == "" {
			return fmt.Errorf("%s: %w: the hub answered 401%s: the repository is gated or private (or does not exist): set HF_TOKEN to a token with access", what, ErrAccess, msg)
		}
		return fmt.Errorf("%s: %w: the hub answered 401%s: HF_TOKEN was not accepted (expired or wrong?), or the repository does not exist", what, ErrAccess, msg)
	case http.StatusForbidden:
		return fmt.Errorf("%s: %w: the hub answered 403%s: the repository is gated and this token has no access yet: accept its conditions at %s/%s", what, ErrAccess, msg, c.endpoint(), repo)
	case http.StatusNotFound:
		code := resp.Header.Get("X-Error-Code")
		switch code {
		case "EntryNotFound":
			return fmt.Errorf("%s: %w: no such file%s", what, ErrNotFound, msg)
		case "RevisionNotFound":
			return fmt.Errorf("%s: %w: no such revision%s", what, ErrNotFound, msg)
		}
		return fmt.Errorf("%s: %w: the hub answered 404%s: check the name", what, ErrNotFound, msg)
	}
	return fmt.Errorf("%s: the hub answered %s%s", what, resp.Status, msg)
}

// fileMeta is what HEAD of resolve/<commit>/<file> says about a file.
type fileMeta struct {
	etag     string // X-Linked-Etag for LFS files, else ETag: what the blob is named
	size     int64
	location string // where the bytes are: the content host for LFS files
}

// head asks the endpoint about one file, without following the redirect of
// an LFS file to its content host, whose headers are not the hub's; a
// redirect within the hub (a renamed repository) is followed, as
// huggingface_hub follows relative redirects.
func (c *Client) head(ctx context.Context, repo, commit, file string) (fileMeta, error) {
	u := c.endpoint() + "/" + repo + "/resolve/" + commit + "/" + escapePath(file)
	client := *c.http()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	var resp *http.Response
	for hops := 0; ; hops++ {
		req, err := c.request(ctx, http.MethodHead, u)
		if err != nil {
			return fileMeta{}, err
		}
		req.Header.Set("Accept-Encoding", "identity")
		resp, err = client.Do(req)
		if err != nil {
			return fileMeta{}, fmt.Errorf("%s: %s: %w", repo, file, err)
		}
		resp.Body.Close()
		loc, lerr := resp.Location()
		if resp.StatusCode < 300 || resp.StatusCode >= 400 || lerr != nil || resp.Header.Get("X-Linked-Etag") != "" ||
			!sameOrigin(loc.String(), c.endpoint()) || hops == 5 {
			break
		}
		u = loc.String()
	}
	if err := c.statusErr(repo, file, resp); err != nil {
		return fileMeta{}, err
	}
	m := fileMeta{location: u}
	m.etag = resp.Header.Get("X-Linked-Etag")
	if m.etag == "" {
		m.etag = resp.Header.Get("ETag")
	}
	m.etag = strings.Trim(strings.TrimPrefix(m.etag, "W/"), `"`)
	size := resp.Header.Get("X-Linked-Size")
	if size == "" {
		size = resp.Header.Get("Content-Length")
	}
	m.size, _ = strconv.ParseInt(size, 10, 64)
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		loc, err := resp.Location()
		if err != nil {
			return fileMeta{}, fmt.Errorf("%s: %s: a redirect without a location: %w", repo, file, err)
		}
		m.location = loc.String()
	}
	if m.etag == "" || strings.ContainsAny(m.etag, `/\`) || m.etag == "." || m.etag == ".." {
		return fileMeta{}, fmt.Errorf("%s: %s: the hub gave no usable ETag (%q), so the file cannot be checked", repo, file, m.etag)
	}
	return m, nil
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
