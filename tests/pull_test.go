package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/hub/hubtest"
)

// From nothing to the demo story by name: pull the demo model and its
// head from a stand-in hub (internal/hub/hubtest says which real hub
// behaviours it imitates and where they are documented), list them, then
// generate with -m owner/name and --drafter auto, which must print
// llama2.c's golden text; a pull stopped by Ctrl-C, SIGTERM or SIGKILL leaves
// nothing where models are read from and the next pull resumes; offline,
// a cached name works and a missing one is a clear error; rm removes.
func TestPullGenerateByName(t *testing.T) {
	gguf, err := os.ReadFile(stories)
	if err != nil {
		t.Fatal(err)
	}
	weights, err := os.ReadFile(filepath.Join(storiesHead, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	cfgRaw, err := os.ReadFile(filepath.Join(storiesHead, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	// A head repository names its base model in its config.
	var cfg map[string]any
	if err := json.Unmarshal(cfgRaw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["base_model_name_or_path"] = "demo/stories260K"
	headCfg, _ := json.Marshal(cfg)
	s := hubtest.New(map[string]*hubtest.Repo{
		"demo/stories260K":         {Files: map[string][]byte{"stories260K.gguf": gguf, "README.md": []byte("# demo\n")}},
		"demo/stories260K-drafter": {Files: map[string][]byte{"config.json": headCfg, "model.safetensors": weights}},
		"demo/gated":               {Files: map[string][]byte{"config.json": headCfg, "model.safetensors": weights}, Gated: true},
	})
	defer s.Close()
	s.Token = "hf_e2eSECRET"
	cache := t.TempDir()
	t.Setenv("HF_ENDPOINT", s.URL())
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_HUB_OFFLINE", "")
	t.Setenv("HF_TOKEN", "")
	snapshots := filepath.Join(cache, "models--demo--stories260K", "snapshots")

	// Ctrl-C, then SIGTERM, during a slow download: nothing placed.
	s.SetFaults(hubtest.Faults{Delay: 20 * time.Millisecond, ChunkSize: 16 << 10})
	for _, c := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		r := interrupt(t, c.sig, `msg="pull demo/stories260K"`, 0, "pull", "demo/stories260K")
		if r.code != c.code || r.stopped > stopBound {
			t.Errorf("pull after %v: exit %d after %v, want %d within %v\n%s", c.sig, r.code, r.stopped, c.code, stopBound, r.stderr)
		}
		if left := files(t, snapshots); len(left) > 0 {
			t.Errorf("%v left files where models are read from: %v", c.sig, left)
		}
	}
	partial := filepath.Join(cache, "models--demo--stories260K", "blobs", hubtest.SHA256(gguf)+".incomplete")
	st, err := os.Stat(partial)
	if err != nil || st.Size() == 0 {
		t.Fatalf("no partial download to resume: %v", err)
	}
	// SIGKILL, which nothing can catch, stops the pull mid-write.
	cmd := exec.Command(bin, "pull", "demo/stories260K")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if now, err := os.Stat(partial); err == nil && now.Size() > st.Size() || time.Now().After(deadline) {
			break
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if left := files(t, snapshots); len(left) > 0 {
		t.Errorf("SIGKILL left files where models are read from: %v", left)
	}
	s.SetFaults(hubtest.Faults{})
	out, stderr, err := runCLI(t, "pull", "demo/stories260K")
	if err != nil {
		t.Fatalf("pull: %v\n%s", err, stderr)
	}
	if want := filepath.Join(snapshots, hubtest.Commit(&hubtest.Repo{Files: map[string][]byte{"stories260K.gguf": gguf, "README.md": []byte("# demo\n")}}), "stories260K.gguf"); out != want+"\n" {
		t.Errorf("pull printed %q, want the model's path %s", out, want)
	}
	if !strings.Contains(stderr, "resuming") {
		t.Errorf("the second pull did not resume the first's download:\n%s", stderr)
	}
	if _, stderr, err := runCLI(t, "pull", "demo/stories260K-drafter"); err != nil {
		t.Fatalf("pull the head: %v\n%s", err, stderr)
	}

	// A gated repository: a clear error without HF_TOKEN; with it, a pull
	// that never shows the token, even at debug level.
	_, stderr, err = runCLI(t, "pull", "demo/gated")
	if err == nil || !strings.Contains(stderr, "401") || !strings.Contains(stderr, "set HF_TOKEN") {
		t.Errorf("gated, no token: %v\n%s", err, stderr)
	}
	t.Setenv("HF_TOKEN", s.Token)
	out, stderr, err = runCLI(t, "--log-level", "debug", "pull", "demo/gated")
	if err != nil || strings.Contains(out+stderr, s.Token) {
		t.Errorf("gated, HF_TOKEN: %v, or the token shown:\n%s%s", err, out, stderr)
	}
	t.Setenv("HF_TOKEN", "")

	list, _, err := runCLI(t, "list")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"demo/stories260K ", "F32", "llama", "demo/stories260K-drafter", "for demo/stories260K", "main "} {
		if !strings.Contains(list, want) {
			t.Errorf("list lacks %q:\n%s", want, list)
		}
	}

	// Offline: the cached names are enough; the stand-in sees nothing.
	t.Setenv("HF_HUB_OFFLINE", "1")
	before := len(s.Requests())
	plain, stderr, err := runCLI(t, "generate", "--backend", "cpu", "-m", "demo/stories260K", "--drafter", "auto",
		"--prompt", "", "--max-tokens", "256", "--stats")
	if err != nil {
		t.Fatalf("generate: %v\n%s", err, stderr)
	}
	if want := goldenGreedy(t) + "\n"; plain != want {
		t.Errorf("generate -m demo/stories260K --drafter auto:\n got: %q\nwant: %q", plain, want)
	}
	if !strings.Contains(stderr, "using a cached draft head") || !strings.Contains(stderr, "redrafter W=") {
		t.Errorf("--drafter auto did not use the cached head:\n%s", stderr)
	}
	if n := len(s.Requests()) - before; n != 0 {
		t.Errorf("offline generate made %d requests", n)
	}
	_, stderr, err = runCLI(t, "generate", "--backend", "cpu", "-m", "demo/missing:Q4_K_M", "-n", "1")
	if err == nil || !strings.Contains(stderr, "HF_HUB_OFFLINE") || !strings.Contains(stderr, "demo/missing:Q4_K_M") {
		t.Errorf("offline, a missing model: %v\n%s", err, stderr)
	}
	t.Setenv("HF_HUB_OFFLINE", "")

	for _, name := range []string{"demo/stories260K-drafter", "demo/gated"} {
		if _, stderr, err := runCLI(t, "rm", name); err != nil {
			t.Fatalf("rm %s: %v\n%s", name, err, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(cache, "models--demo--stories260K-drafter")); !os.IsNotExist(err) {
		t.Errorf("rm left the head's folder: %v", err)
	}
	_, stderr, err = runCLI(t, "generate", "--backend", "cpu", "-m", "demo/stories260K", "--drafter", "auto", "-n", "4")
	if err != nil || !strings.Contains(stderr, "no cached draft head") {
		t.Errorf("--drafter auto with no head: %v\n%s", err, stderr)
	}
}
