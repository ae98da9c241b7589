package hub

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A real full disk: the cache on a 256 KiB tmpfs (where this runs as root;
// elsewhere TestDiskFull's injected write error covers the same path). The
// file system's own free space refuses the pull before it starts; told
// there is room, the kernel's ENOSPC stops it with nothing placed.
func TestDiskFullOnTmpfs(t *testing.T) {
	s, _ := standIn(t)
	cache := filepath.Join(t.TempDir(), "cache")
	if err := unix.Mkdir(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", cache, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v): TestDiskFull covers this with an injected error", err)
	}
	t.Cleanup(func() { unix.Unmount(cache, unix.MNT_DETACH) })
	c := &Client{Cache: cache, Endpoint: s.URL()}
	_, err := c.Pull(context.Background(), Name{Repo: "owner/ckpt"}, "")
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "needs 300.1 kB") || !strings.Contains(err.Error(), "262.1 kB free") {
		t.Errorf("err = %v, want a refusal naming 300.1 kB needed and 262.1 kB free", err)
	}
	c.freeSpace = func(string) (int64, error) { return 1 << 30, nil }
	_, err = c.Pull(context.Background(), Name{Repo: "owner/ckpt"}, "")
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("err = %v, want ENOSPC", err)
	}
	nothingPlaced(t, cache, "owner/ckpt")
}
