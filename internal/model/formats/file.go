package formats

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrNotRegular is wrapped by the errors of OpenFile, ReadFile and the
// readers built on them for a path that is a named pipe, a device, a
// socket or a directory where a file is wanted. Opening a named pipe for
// reading blocks until a writer comes, so these are refused before any read.
var ErrNotRegular = errors.New("not a regular file")

// notRegular says what path is instead of a regular file.
func notRegular(path string, m fs.FileMode) error {
	return fmt.Errorf("%s is %s, %w", path, describeMode(m), ErrNotRegular)
}

func describeMode(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}

// CheckFileOrDir returns path's FileInfo if it is a regular file or a
// directory (after symbolic links), and an error wrapping ErrNotRegular for
// anything else. It does not open path, so it cannot block on a named pipe.
func CheckFileOrDir(path string) (fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if m := st.Mode(); !m.IsRegular() && !m.IsDir() {
		return nil, fmt.Errorf("%s is %s, not a regular file or a directory: %w", path, describeMode(m), ErrNotRegular)
	}
	return st, nil
}

// OpenFile opens path for reading if it is a regular file, and refuses
// anything else without blocking (see ErrNotRegular).
func OpenFile(path string) (*os.File, fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, notRegular(path, st.Mode())
	}
	f, err := openNoBlock(path)
	if err != nil {
		return nil, nil, err
	}
	// The path may have been replaced between Stat and open: check the
	// file that was opened.
	if st, err = f.Stat(); err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, notRegular(path, st.Mode())
	}
	return f, st, nil
}

// ReadFile is os.ReadFile for regular files only: it refuses a named pipe,
// a device, a socket or a directory without blocking (see ErrNotRegular).
func ReadFile(path string) ([]byte, error) {
	f, _, err := OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
