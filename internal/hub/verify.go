package hub

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
)

// verify checks a downloaded file against the hub's ETag: an LFS file's is
// the SHA-256 of its bytes (X-Linked-Etag), any other file's the git blob
// SHA-1 ("blob <size>\x00" and the bytes). An ETag of neither form (a
// mirror's) leaves only the size to check.
func verify(name string, m fileMeta) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if m.size > 0 && st.Size() != m.size {
		return fmt.Errorf("%w: %d bytes, the hub says %d", ErrChecksum, st.Size(), m.size)
	}
	var h hash.Hash
	switch {
	case isHex(m.etag, 64):
		h = sha256.New()
	case isHex(m.etag, 40):
		h = sha1.New()
		io.WriteString(h, "blob "+strconv.FormatInt(st.Size(), 10)+"\x00")
	default:
		slog.Warn("the server's ETag is no checksum: only the size was checked", "file", name, "etag", m.etag)
		return nil
	}
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != strings.ToLower(m.etag) {
		return fmt.Errorf("%w: the bytes hash to %s, the hub says %s", ErrChecksum, got, m.etag)
	}
	return nil
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
