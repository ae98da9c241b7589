// Package deploy tests what docs/DEPLOY.md deploys, against the upstream
// code that will read it: the Kubernetes manifests (deploy/kubernetes)
// decoded strictly into k8s.io/api's, Gateway API's and the inference
// extension's types, the container images built from scratch and run, the
// systemd and launchd files; ./picker runs the inference extension's own
// metrics scraper against the server. It is a module of its own, so that
// the Kubernetes modules stay out of redrafter's go.mod; `make test` runs it
// (make test-clients). It builds the redrafter binary first.
package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

const stories = "../../models/stories260K/stories260K.gguf"

// bin is the redrafter binary built for this run.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "redrafter-deploy-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "redrafter")
	build := exec.Command("go", "build", "-o", bin, "./cmd/redrafter")
	build.Dir = "../.."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building redrafter:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
