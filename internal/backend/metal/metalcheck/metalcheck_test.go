package metalcheck

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	msl "github.com/seed9b8f47b1/redrafter/internal/backend/metal/shaders"
)

// TestSelfTestOnFake runs the self-test on the fake device (each step run
// by the CPU reference): it must cover every kernel and pass, and the
// report must say so.
func TestSelfTestOnFake(t *testing.T) {
	be := metal.NewFake(metal.DefaultPolicy(metal.DeviceInfo{}), metal.Fake{Reference: cpu.NewReference()})
	defer be.Close()
	vs, err := SelfTest(be, cpu.NewReference(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if !Write(&buf, be.Device(), vs) {
		t.Errorf("self-test failed on the fake device:\n%s", buf.String())
	}
	if want := fmt.Sprintf("%d passed, 0 failed", len(vs)); !strings.Contains(buf.String(), want) {
		t.Errorf("report:\n%s", buf.String())
	}
	t.Logf("\n%s", buf.String())
}

// TestSelfTestReportsCompileErrors: when Apple's compiler refuses one file,
// the self-test still runs every other kernel, fails that file's kernels
// with "does not compile", and prints the compiler's log once. The refused
// file is rope.metal, whose kernels only RoPE's cases run (a file that a
// composed op also dispatches, as norm.metal is by a prefill Linear, fails
// those cases' other kernels too).
func TestSelfTestReportsCompileErrors(t *testing.T) {
	log := "metal: compiling internal/backend/metal/shaders/rope.metal: program_source:12:3: error: use of undeclared identifier 'x'\n  x = 1;\n  ^"
	be := metal.NewFake(metal.DefaultPolicy(metal.DeviceInfo{}), metal.Fake{Reference: cpu.NewReference(),
		Refuse: map[string]error{"rope.metal": errors.New(log)}})
	defer be.Close()
	vs, err := SelfTest(be, cpu.NewReference(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	lib, err := msl.Library()
	if err != nil {
		t.Fatal(err)
	}
	file := map[string]string{}
	for _, k := range lib {
		file[k.Name] = k.File
	}
	failed := 0
	for _, v := range vs {
		inRope := file[v.Kernel] == "rope.metal"
		if inRope != !v.OK() {
			t.Errorf("%s: ok=%v (%s)", v.Kernel, v.OK(), v.Fail)
		}
		if inRope {
			failed++
			if !strings.HasPrefix(v.Fail, "does not compile: ") || !strings.Contains(v.Fail, "undeclared identifier") {
				t.Errorf("%s: %q", v.Kernel, v.Fail)
			}
		}
	}
	if failed == 0 {
		t.Fatal("no rope kernel in the library")
	}
	var buf bytes.Buffer
	if Write(&buf, be.Device(), vs) {
		t.Error("Write reported success")
	}
	out := buf.String()
	if n := strings.Count(out, "  x = 1;"); n != 1 {
		t.Errorf("the compiler log is printed %d times:\n%s", n, out)
	}
	if want := fmt.Sprintf("%d passed, %d failed\n", len(vs)-failed, failed); !strings.HasSuffix(out, want) {
		t.Errorf("report does not end with %q:\n%s", want, out)
	}
	t.Logf("\n%s", out)
}
