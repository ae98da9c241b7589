//go:build linux || darwin

package formats

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mkfifo makes a named pipe in a temporary directory.
func mkfifo(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	return p
}

// within runs f and fails the test if it has not returned in 5 s: opening a
// named pipe for reading blocks until a writer comes.
func within(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s blocked on a named pipe", what)
		return nil
	}
}

func TestNamedPipesAreRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		open func(string) error
	}{
		{"model.gguf", func(p string) error { _, err := OpenGGUF(p); return err }},
		{"model.safetensors", func(p string) error { _, err := OpenSafetensors(p); return err }},
		{"config.json", func(p string) error { _, err := ReadHFConfig(p); return err }},
		{"file", func(p string) error { _, err := ReadFile(p); return err }},
		{"dir/model.safetensors", func(p string) error { _, err := OpenSafetensorsDir(filepath.Dir(p)); return err }},
		{"dir/model.safetensors.index.json", func(p string) error { _, err := OpenSafetensorsDir(filepath.Dir(p)); return err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, c.name)
			if strings.HasPrefix(c.name, "dir/") {
				p = filepath.Join(dir, filepath.Base(c.name))
			}
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			err := within(t, c.name, func() error { return c.open(p) })
			if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "named pipe") {
				t.Fatalf("got %v, want an error naming %s as a named pipe", err, p)
			}
		})
	}
	p := mkfifo(t, "pipe")
	if _, err := CheckFileOrDir(p); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("CheckFileOrDir(fifo) = %v", err)
	}
	if _, err := CheckFileOrDir(t.TempDir()); err != nil {
		t.Fatalf("CheckFileOrDir(dir) = %v", err)
	}
	if _, err := ReadFile(t.TempDir()); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("ReadFile(dir) = %v", err)
	}
}
