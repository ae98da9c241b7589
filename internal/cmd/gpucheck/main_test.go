package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

// TestRunRefuses: without a GPU backend to check, gpucheck says what to
// pass, and a backend that cannot open on this machine is an error that
// says why, not a crash.
func TestRunRefuses(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{nil, "use --backend metal"},
		{[]string{"--backend", "cpu"}, "use --backend metal"},
		{[]string{"--backend", "metal", "extra"}, "unexpected arguments"},
	}
	if runtime.GOOS != "darwin" {
		cases = append(cases, struct {
			args []string
			want string
		}{[]string{"--backend", "metal"}, "Metal is not available on this system"})
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		if err := run(c.args, &out, &errOut); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("gpucheck %q: error %v, want one containing %q", c.args, err, c.want)
		}
	}
}
