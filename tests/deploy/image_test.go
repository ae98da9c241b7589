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

// The CPU image's stage of deploy/docker/Dockerfile, built from scratch
// with buildah around a binary built here as its build stage would, is
// what the Dockerfile promises (non-root, the cache volume, HF_HUB_CACHE,
// `redrafter serve` on 0.0.0.0 as entry point, CA certificates), refuses
// to serve without a key, and, run with a key and the demo model mounted,
// answers /health and a greedy completion equal to `redrafter generate`'s.
func TestImage(t *testing.T) {
	if _, err := exec.LookPath("buildah"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("buildah is missing, and CI must build the image (scripts/deps.sh installs it)")
		}
		t.Skip("SKIPPED, NOT PASSED: no buildah (scripts/deps.sh installs it with apt)")
	}
	start := time.Now()
	containerfile, sources := finalStage(t, "cpu")
	work := t.TempDir()
	ctx := filepath.Join(work, "context")
	for _, src := range sources {
		dst := filepath.Join(ctx, "ctx", src)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		switch src {
		case "/out/redrafter":
			// Static, as the build-cpu stage builds it (without its
			// -trimpath and -s -w, which change no behaviour, and would
			// make this a build of every package from nothing).
			build := exec.Command("go", "build", "-o", dst, "./cmd/redrafter")
			build.Dir, build.Env = "../..", append(os.Environ(), "CGO_ENABLED=0")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("building the static binary: %v\n%s", err, out)
			}
		case "/out/cache":
			if err := os.MkdirAll(filepath.Join(dst, "hub"), 0o755); err != nil {
				t.Fatal(err)
			}
		case "/etc/ssl/certs/ca-certificates.crt":
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatalf("the CA certificates the image copies: %v", err)
			}
			os.WriteFile(dst, b, 0o644)
		default:
			t.Fatalf("the cpu stage copies %s, which this test does not know how to provide", src)
		}
	}
	os.WriteFile(filepath.Join(ctx, "Containerfile"), []byte(containerfile), 0o644)
	t.Logf("context ready after %v", time.Since(start).Round(time.Millisecond))
	storage := filepath.Join(work, "buildah")
	if out, err := buildah(t, storage, "bud", "--isolation", "chroot", "--pull=never", "-f", filepath.Join(ctx, "Containerfile"), "-t", "redrafter-test:cpu", ctx).CombinedOutput(); err != nil {
		t.Fatalf("buildah bud: %v\n%s", err, out)
	}
	t.Logf("built after %v", time.Since(start).Round(time.Millisecond))
	out, err := buildah(t, storage, "inspect", "--type", "image", "redrafter-test:cpu").Output()
	if err != nil {
		t.Fatal(err)
	}
	var img struct {
		OCIv1 struct {
			Config struct {
				User         string
				Entrypoint   []string
				Env          []string
				Volumes      map[string]struct{}
				ExposedPorts map[string]struct{}
			} `json:"config"`
		}
	}
	if err := json.Unmarshal(out, &img); err != nil {
		t.Fatal(err)
	}
	cfg := img.OCIv1.Config
	if cfg.User != "65532:65532" || !slices.Contains(cfg.Env, "HF_HUB_CACHE=/cache/hub") || len(cfg.Volumes) != 1 {
		t.Errorf("image config: user %q, env %v, volumes %v", cfg.User, cfg.Env, cfg.Volumes)
	}
	if _, ok := cfg.Volumes["/cache"]; !ok {
		t.Errorf("no /cache volume: %v", cfg.Volumes)
	}
	if len(cfg.Entrypoint) < 4 || cfg.Entrypoint[0] != "/usr/local/bin/redrafter" || cfg.Entrypoint[1] != "serve" || !slices.Contains(cfg.Entrypoint, "0.0.0.0") {
		t.Fatalf("entry point %v", cfg.Entrypoint)
	}

	ctr, err := buildah(t, storage, "from", "--pull=never", "redrafter-test:cpu").Output()
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimSpace(string(ctr))
	models, _ := filepath.Abs("../../models/stories260K")
	run := func(args ...string) *exec.Cmd {
		// buildah run starts what it is given, as the image's user: the
		// entry point is given exactly as the image holds it.
		return buildah(t, storage, append(append([]string{"run", "--isolation", "chroot", "-v", models + ":/models:ro", name, "--"}, cfg.Entrypoint...), args...)...)
	}
	// On 0.0.0.0 without a key: refused.
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
