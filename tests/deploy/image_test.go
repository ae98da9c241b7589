package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const dockerfile = "../../deploy/docker/Dockerfile"

// finalStage returns the Dockerfile's stage named name (its FROM line to
// the next FROM), with each COPY --from=STAGE turned into a COPY from the
// build context, and the source paths it copies, so that the stage builds
// from a context this test fills instead of the build stages (which pull a
// Go image).
func finalStage(t *testing.T, name string) (containerfile string, sources []string) {
	t.Helper()
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	copyFrom := regexp.MustCompile(`^COPY --from=\S+ (--chown=\S+ )?(.+) (\S+)$`)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "FROM ") {
			in = strings.HasSuffix(line, " AS "+name)
			if in && !strings.HasPrefix(line, "FROM scratch ") {
				t.Fatalf("the %s stage is not FROM scratch: %q", name, line)
			}
		}
		if !in {
			continue
		}
		if m := copyFrom.FindStringSubmatch(line); m != nil {
			srcs := strings.Fields(m[2])
			var local []string
			for _, s := range srcs {
				sources = append(sources, s)
				local = append(local, "ctx"+s)
			}
			line = "COPY " + m[1] + strings.Join(local, " ") + " " + m[3]
		} else if strings.HasPrefix(line, "COPY ") {
			t.Fatalf("a COPY from the build context in the final stage: %q", line)
		}
		out = append(out, line)
	}
	if len(out) == 0 {
		t.Fatalf("no stage %s in %s", name, dockerfile)
	}
	return strings.Join(out, "\n") + "\n", sources
}

// buildah runs buildah on storage of the test's own, with chroot isolation
// (no namespaces or cgroups needed: podman's crun cannot run containers in
// this sandbox's hybrid cgroups, docs/DEPLOY.md).
func buildah(t *testing.T, root string, args ...string) *exec.Cmd {
	return exec.Command("buildah", append([]string{"--root", filepath.Join(root, "storage"), "--runroot", filepath.Join(root, "run"), "--storage-driver", "vfs"}, args...)...)
}

// imageConfig is what the test checks of an image's OCI config.
type imageConfig struct {
	User       string
	Entrypoint []string
	Env        []string
	Volumes    map[string]struct{}
}

func needBuildah(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("buildah"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("buildah is missing, and CI must build the image (scripts/deps.sh installs it)")
		}
		t.Skip("SKIPPED, NOT PASSED: no buildah (scripts/deps.sh installs it with apt)")
	}
}

// buildStage builds the Dockerfile's stage (see finalStage) from scratch
// with the binary built with tags, checks what every final stage promises
// (non-root, the cache volume, HF_HUB_CACHE, `redrafter serve` on 0.0.0.0
// as entry point), and returns the buildah storage and the image's config.
func buildStage(t *testing.T, stage, tags string) (storage string, cfg imageConfig) {
	t.Helper()
	containerfile, sources := finalStage(t, stage)
	work := t.TempDir()
	ctx := filepath.Join(work, "context")
	for _, src := range sources {
		dst := filepath.Join(ctx, "ctx", src)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		switch src {
		case "/out/redrafter":
			// As the build stage builds it, static for cpu, with the cuda
			// tag for cuda (without its -trimpath and -s -w, which change
			// no behaviour, and would make this a build of every package
			// from nothing).
			build := exec.Command("go", "build", "-tags", tags, "-o", dst, "./cmd/redrafter")
			build.Dir, build.Env = "../..", append(os.Environ(), "CGO_ENABLED=0")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("building the static binary: %v\n%s", err, out)
			}
		case "/out/cache":
			if err := os.MkdirAll(filepath.Join(dst, "hub"), 0o755); err != nil {
				t.Fatal(err)
			}
		case "/etc/ssl/certs/ca-certificates.crt", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6",
			"/lib/x86_64-linux-gnu/libdl.so.2", "/lib/x86_64-linux-gnu/libpthread.so.0":
			// This Debian machine's, as the Go image's (Debian bookworm).
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatalf("a file the image copies: %v", err)
			}
			os.WriteFile(dst, b, 0o755)
		default:
			t.Fatalf("the %s stage copies %s, which this test does not know how to provide", stage, src)
		}
	}
	os.WriteFile(filepath.Join(ctx, "Containerfile"), []byte(containerfile), 0o644)
	storage = filepath.Join(work, "buildah")
	if out, err := buildah(t, storage, "bud", "--isolation", "chroot", "--pull=never", "-f", filepath.Join(ctx, "Containerfile"), "-t", "redrafter-test:"+stage, ctx).CombinedOutput(); err != nil {
		t.Fatalf("buildah bud: %v\n%s", err, out)
	}
	out, err := buildah(t, storage, "inspect", "--type", "image", "redrafter-test:"+stage).Output()
	if err != nil {
		t.Fatal(err)
	}
	var img struct {
		OCIv1 struct {
			Config imageConfig `json:"config"`
		}
	}
	if err := json.Unmarshal(out, &img); err != nil {
		t.Fatal(err)
	}
	cfg = img.OCIv1.Config
	if cfg.User != "65532:65532" || !slices.Contains(cfg.Env, "HF_HUB_CACHE=/cache/hub") || len(cfg.Volumes) != 1 {
		t.Errorf("image config: user %q, env %v, volumes %v", cfg.User, cfg.Env, cfg.Volumes)
	}
	if _, ok := cfg.Volumes["/cache"]; !ok {
		t.Errorf("no /cache volume: %v", cfg.Volumes)
	}
	if len(cfg.Entrypoint) < 4 || cfg.Entrypoint[0] != "/usr/local/bin/redrafter" || cfg.Entrypoint[1] != "serve" || !slices.Contains(cfg.Entrypoint, "0.0.0.0") {
		t.Fatalf("entry point %v", cfg.Entrypoint)
	}
	return storage, cfg
}

// container makes a container of image and returns a command that runs the
// image's entry point with args in it, with the demo model at /models.
// buildah run starts what it is given as the image's user, so the entry
// point is given exactly as the image holds it.
func container(t *testing.T, storage, image string, entrypoint []string) func(args ...string) *exec.Cmd {
	t.Helper()
	ctr, err := buildah(t, storage, "from", "--pull=never", image).Output()
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimSpace(string(ctr))
	models, _ := filepath.Abs("../../models/stories260K")
	return func(args ...string) *exec.Cmd {
		return buildah(t, storage, append(append([]string{"run", "--isolation", "chroot", "-v", models + ":/models:ro", name, "--"}, entrypoint...), args...)...)
	}
}

// The CPU image's stage of deploy/docker/Dockerfile, built from scratch
// with buildah around a binary built here as its build stage would, holds
// what the Dockerfile promises, refuses to serve on 0.0.0.0 without a key,
// and, run with a key and the demo model mounted, answers /health and a
// greedy completion equal to `redrafter generate`'s.
func TestImage(t *testing.T) {
	needBuildah(t)
	start := time.Now()
	storage, cfg := buildStage(t, "cpu", "")
	t.Logf("built after %v", time.Since(start).Round(time.Millisecond))
	run := container(t, storage, "redrafter-test:cpu", cfg.Entrypoint)
	if out, err := run("-m", "/models/stories260K.gguf").CombinedOutput(); err == nil || !strings.Contains(string(out), "--no-api-key") {
		t.Errorf("the image without a key: %v\n%s", err, out)
	}

	port := freePort(t)
	cmd := run("-m", "/models/stories260K.gguf", "--port", fmt.Sprint(port), "--api-key", "k", "--backend", "cpu")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
		}
	})
	sc := bufio.NewScanner(stderr)
	var logs strings.Builder
	for sc.Scan() {
		logs.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "msg=listening") {
			break
		}
	}
	go func() { io.Copy(io.Discard, stderr); exited <- cmd.Wait() }()
	t.Logf("serving after %v", time.Since(start).Round(time.Millisecond))
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatalf("health: %v\n%s", err, logs.String())
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("health: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(`{"prompt":"Once upon a time","max_tokens":32,"temperature":0}`))
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var completion struct {
		Choices []struct{ Text string } `json:"choices"`
	}
	json.NewDecoder(resp.Body).Decode(&completion)
	resp.Body.Close()
	want, err := exec.Command(bin, "generate", "--backend", "cpu", "-m", stories, "--prompt", "Once upon a time", "--max-tokens", "32").Output()
	if err != nil {
		t.Fatal(err)
	}
	if len(completion.Choices) != 1 || completion.Choices[0].Text+"\n" != string(want) {
		t.Errorf("the container's greedy completion %+v, want redrafter generate's %q", completion, want)
	}
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// The CUDA image's stage: the -tags cuda binary, dynamically linked for
// the driver library, runs from scratch with the glibc files the stage
// copies (the loader finds them), and on this machine, which has no
// driver, says clearly that libcuda.so.1 is missing.
func TestImageCUDA(t *testing.T) {
	needBuildah(t)
	storage, cfg := buildStage(t, "cuda", "cuda")
	if !slices.Contains(cfg.Entrypoint, "cuda") {
		t.Errorf("the cuda image's entry point does not choose the cuda backend: %v", cfg.Entrypoint)
	}
	run := container(t, storage, "redrafter-test:cuda", cfg.Entrypoint)
	out, err := run("-m", "/models/stories260K.gguf", "--api-key", "k", "--port", "0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "libcuda.so.1") || !strings.Contains(string(out), "is the NVIDIA driver installed") {
		t.Errorf("the cuda image without a driver: %v\n%s", err, out)
	}
}
