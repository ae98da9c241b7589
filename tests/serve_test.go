package tests

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// redrafter serve on a Unix socket (mode 0600): it answers there, and
// Ctrl-C shuts it down cleanly (exit 0) and removes the socket.
func TestServeUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redrafter.sock")
	cmd := exec.Command(bin, "serve", "--backend", "cpu", "-m", stories, "--socket", sock)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stderr)
	var logs strings.Builder
	for sc.Scan() {
		logs.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "msg=listening") {
			break
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	st, err := os.Stat(sock)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the socket: %v %v\n%s", st, err, logs.String())
	}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := client.Get("http://redrafter/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health over the socket: %v %v", resp, err)
	}
	resp.Body.Close()
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve after Ctrl-C: %v, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve still running 30 s after Ctrl-C")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is left behind: %v", err)
	}
}

func TestServeFlagErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(file, []byte("keep me"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--parallel", "0"}, "--parallel 0"},
		{[]string{"--queue", "-1"}, "--queue -1"},
		{[]string{"--port", "70000"}, "--port 70000"},
		{[]string{"--socket", file}, "not a socket"},
		{[]string{"--socket", file, "--port", "1"}, "not both"},
	} {
		_, stderr, err := runCLI(t, append([]string{"serve", "--backend", "cpu", "-m", stories}, c.args...)...)
		if err == nil || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: %v %q, want an error with %q", c.args, err, stderr, c.want)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "keep me" {
		t.Error("--socket over a regular file changed it")
	}
}
