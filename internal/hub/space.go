package hub

import (
	"fmt"
	"os"
	"path/filepath"
)

// checkSpace refuses a pull whose downloads the disk cannot hold: the
// selected files not yet in the cache, less what their partial downloads
// already hold.
func (c *Client) checkSpace(dir string, sel []string, files map[string]repoFile) error {
	var need int64
	for _, f := range sel {
		rf := files[f]
		etag := rf.Oid
		if rf.LFS != nil {
			etag = rf.LFS.Oid
		}
		blob := filepath.Join(dir, "blobs", etag)
		if _, err := os.Stat(blob); err == nil && etag != "" {
			continue
		}
		need += rf.size()
		if st, err := os.Stat(blob + ".incomplete"); err == nil && etag != "" && st.Size() <= rf.size() {
			need -= st.Size()
		}
	}
	if need == 0 {
		return nil
	}
	free := c.freeSpace
	if free == nil {
		free = freeBytes
	}
	at := existingAncestor(dir)
	avail, err := free(at)
	if err != nil {
		return nil // unknown: the writes will tell
	}
	if need > avail {
		return fmt.Errorf("%w: the download needs %s and %s has %s free", ErrNoSpace, Size(need), at, Size(avail))
	}
	return nil
}

// existingAncestor is dir or its nearest ancestor that exists.
func existingAncestor(dir string) string {
	for {
		if _, err := os.Stat(dir); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		dir = parent
	}
}

// Size formats a byte count for people (decimal units, as the hub shows
// sizes).
func Size(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}
