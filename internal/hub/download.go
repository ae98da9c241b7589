package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"time"
)

// pullFile puts one file in the cache: its blob (downloaded unless there),
// then its link in the snapshot.
func (c *Client) pullFile(ctx context.Context, repo, commit, file string, treeSize int64, p *Progress) error {
	m, err := c.head(ctx, repo, commit, file)
	if err != nil {
		return err
	}
	if m.size == 0 {
		m.size = treeSize
	}
	dir := repoDir(c.Cache, repo)
	blob := filepath.Join(dir, "blobs", m.etag)
	link := filepath.Join(dir, "snapshots", commit, filepath.FromSlash(file))
	p.File, p.Done, p.Total = file, 0, m.size
	if _, err := os.Stat(blob); err != nil {
		if err := c.download(ctx, repo, file, m, blob, p); err != nil {
			return err
		}
		p.AllDone += m.size // the download reported its bytes
	} else {
		slog.Debug("hub: already in the cache", "repo", repo, "file", file)
		p.Done = m.size
		p.AllDone += m.size
		c.report(*p)
	}
	return placeLink(blob, link)
}

func (c *Client) report(p Progress) {
	if c.Progress != nil {
		c.Progress(p)
	}
}

// download fetches one blob under its lock, continuing a partial download,
// and places it once its bytes check out.
func (c *Client) download(ctx context.Context, repo, file string, m fileMeta, blob string, p *Progress) error {
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		return err
	}
	lockPath := filepath.Join(c.Cache, ".locks", folder(repo), m.etag+".lock")
	unlock, err := lockFile(ctx, lockPath, func() {
		slog.Info("waiting for another pull of the same file", "repo", repo, "file", file)
	})
	if err != nil {
		return fmt.Errorf("%s: %s: locking %s: %w", repo, file, lockPath, err)
	}
	defer unlock()
	if _, err := os.Stat(blob); err == nil {
		all := *p // the other pull placed it
		all.Done, all.AllDone = m.size, p.AllDone+m.size
		c.report(all)
		return nil
	}
	partial := blob + ".incomplete"
	base := p.AllDone
	for attempt := 0; ; attempt++ {
		err := c.fetch(ctx, repo, file, m, partial, base, p)
		if err == nil {
			break
		}
		if ctx.Err() != nil || !transient(err) || attempt == retries {
			return err
		}
		slog.Warn("download interrupted, continuing", "repo", repo, "file", file, "err", err)
		if err := c.wait(ctx, time.Duration(attempt+1)*200*time.Millisecond); err != nil {
			return err
		}
	}
	if err := verify(partial, m); err != nil {
		os.Remove(partial) // a partial download with wrong bytes is no start for the next pull
		return fmt.Errorf("%s: %s: %w; the download was removed: pull again", repo, file, err)
	}
	if err := os.Chmod(partial, 0o644); err != nil {
		return err
	}
	return os.Rename(partial, blob)
}

func (c *Client) wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errTransient marks a break worth continuing from where it stopped.
var errTransient = errors.New("transfer broke off")

func transient(err error) bool { return errors.Is(err, errTransient) }

// fetch appends the rest of the file to partial, from its current size.
func (c *Client) fetch(ctx context.Context, repo, file string, m fileMeta, partial string, base int64, p *Progress) error {
	f, err := os.OpenFile(partial, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	have := st.Size()
	if have > m.size {
		have = 0
	}
	if have == m.size && m.size > 0 {
		return nil
	}
	req, err := c.request(ctx, http.MethodGet, m.location)
	if err != nil {
		return err
	}
	if have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", have))
		slog.Info("resuming a partial download", "repo", repo, "file", file, "from", have, "of", m.size)
	}
	client := *c.http()
	client.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("more than 10 redirects")
		}
		// The token is the hub's: never sent to a content host.
		if !sameOrigin(r.URL.String(), c.endpoint()) {
			r.Header.Del("Authorization")
		}
		return nil
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s: %s: %w: %v", repo, file, errTransient, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusPartialContent && have > 0:
	case resp.StatusCode == http.StatusOK:
		have = 0 // the server sends it whole
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		have = 0 // the partial file is not a prefix of this one
		if err := f.Truncate(0); err != nil {
			return err
		}
		return fmt.Errorf("%s: %s: %w: the server refused the range", repo, file, errTransient)
	default:
		if err := c.statusErr(repo, file, resp); err != nil {
			return err
		}
		return fmt.Errorf("%s: %s: unexpected answer %s", repo, file, resp.Status)
	}
	if err := f.Truncate(have); err != nil {
		return err
	}
	if _, err := f.Seek(have, io.SeekStart); err != nil {
		return err
	}
	var w io.Writer = f
	if c.wrapWrite != nil {
		w = c.wrapWrite(w)
	}
	p.Done = have
	buf := make([]byte, 256<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return fmt.Errorf("%s: %s: writing %s: %w", repo, file, partial, err)
			}
			p.Done += int64(n)
			all := *p
			all.AllDone = base + p.Done
			c.report(all)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%s: %s: %w after %d of %d bytes: %v", repo, file, errTransient, p.Done, m.size, rerr)
		}
	}
	if p.Done < m.size {
		return fmt.Errorf("%s: %s: %w after %d of %d bytes", repo, file, errTransient, p.Done, m.size)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// placeLink links a snapshot's file to its blob (relative, as
// huggingface_hub does), replacing whatever link was there.
func placeLink(blob, link string) error {
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(link), blob)
	if err != nil {
		return err
	}
	if cur, err := os.Readlink(link); err == nil && cur == rel {
		return nil
	}
	tmp := link + ".tmp-link"
	os.Remove(tmp)
	if err := os.Symlink(rel, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, link)
}

// writeAtomic writes a small file by a rename, so a reader sees the old
// contents or the new, never part.
func writeAtomic(name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+path.Base(name)+".tmp")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr != nil || cerr != nil {
		os.Remove(tmp.Name())
		return errors.Join(werr, cerr)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}
