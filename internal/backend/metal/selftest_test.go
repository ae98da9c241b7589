package metal

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestSelfTestOnFake runs the self-test on the fake device: it must cover
// every kernel and pass, and the report must say so.
func TestSelfTestOnFake(t *testing.T) {
	be := NewFake(DefaultPolicy(DeviceInfo{}))
	vs, err := SelfTest(be, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if !WriteSelfTest(&buf, be.Device(), vs) {
		t.Errorf("self-test failed on the fake device:\n%s", buf.String())
	}
	if want := fmt.Sprintf("%d passed, 0 failed", len(vs)); !strings.Contains(buf.String(), want) {
		t.Errorf("report:\n%s", buf.String())
	}
	t.Logf("\n%s", buf.String())
}

func TestDevicesWithoutMetal(t *testing.T) {
	rs, err := Devices()
	if err == nil {
		var buf bytes.Buffer
		WriteDevices(&buf, rs)
		t.Logf("\n%s", buf.String())
		return
	}
	if !strings.Contains(err.Error(), "not available") {
		t.Errorf("Devices() error %v, want one saying Metal is not available", err)
	}
	if _, err := Open(); err == nil || !strings.Contains(err.Error(), "not available") {
		t.Errorf("Open() error %v", err)
	}
}

// TestWriteDevices checks the table a Mac user sends back: one row per GPU
// with its cores ("unknown" when the system does not say) and its beam.
func TestWriteDevices(t *testing.T) {
	infos := []DeviceInfo{
		{Name: "Apple M2 Max", Architecture: "applegpu_g14s", Family: "Apple8", UnifiedMemory: true,
			WorkingSet: 48 << 30, MaxBuffer: 24 << 30, Cores: 38},
		{Name: "Apple M1", Family: "Apple7", UnifiedMemory: true, WorkingSet: 11 << 30, MaxBuffer: 8 << 30},
	}
	var rs []DeviceReport
	for _, inf := range infos {
		rs = append(rs, DeviceReport{DeviceInfo: inf, Beam: RecommendedBeam(inf), Policy: DefaultPolicy(inf)})
	}
	var buf bytes.Buffer
	WriteDevices(&buf, rs)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "cores") {
		t.Fatalf("table:\n%s", buf.String())
	}
	for i, want := range [][]string{
		{"Apple M2 Max", "applegpu_g14s", "Apple8", "38", "48 GiB", "24 GiB", "2×4", "50"},
		{"Apple M1", "unknown", "Apple7", "unknown", "11 GiB", "8 GiB", "1×4", "40"},
	} {
		if got := strings.Fields(lines[i+1]); !slicesContainAll(got, want) {
			t.Errorf("row %d = %q, want fields %q", i, lines[i+1], want)
		}
	}
}

func slicesContainAll(have, want []string) bool {
	joined := " " + strings.Join(have, " ") + " "
	for _, w := range want {
		if !strings.Contains(joined, " "+w+" ") {
			return false
		}
	}
	return true
}

// TestSelfTestReportsCompileErrors: when Apple's compiler refuses one file,
// the self-test still runs every other kernel, fails that file's kernels
// with "does not compile", and prints the compiler's log once.
func TestSelfTestReportsCompileErrors(t *testing.T) {
	dev := newFakeDevice()
	log := "metal: compiling internal/backend/metal/shaders/norm.metal: program_source:12:3: error: use of undeclared identifier 'x'\n  x = 1;\n  ^"
	dev.refuse = map[string]error{"norm.metal": errors.New(log)}
	be := newBackend(dev, DefaultPolicy(DeviceInfo{}))
	vs, err := SelfTest(be, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, v := range vs {
		inNorm := kernelFamily(v.Kernel) == "norm"
		if inNorm != !v.OK() {
			t.Errorf("%s: ok=%v (%s)", v.Kernel, v.OK(), v.Fail)
		}
		if inNorm {
			failed++
			if !strings.HasPrefix(v.Fail, "does not compile: ") || !strings.Contains(v.Fail, "undeclared identifier") {
				t.Errorf("%s: %q", v.Kernel, v.Fail)
			}
		}
	}
	if failed == 0 {
		t.Fatal("no norm kernel in the library")
	}
	var buf bytes.Buffer
	if WriteSelfTest(&buf, be.Device(), vs) {
		t.Error("WriteSelfTest reported success")
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
