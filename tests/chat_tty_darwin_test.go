package tests

import "golang.org/x/sys/unix"

// ioctlGetTermios reads a terminal's modes (on a pty's master side: the pair's).
const ioctlGetTermios = unix.TIOCGETA
