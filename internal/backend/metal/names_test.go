package metal

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	msl "github.com/seed9b8f47b1/redrafter/internal/backend/metal/shaders"
)

// TestKernelNames checks the host/kernel contract: every name the host can
// build exists in the library, the library has no kernel the host cannot
// ask for, and each kernel lives in the file of its family.
func TestKernelNames(t *testing.T) {
	lib, err := msl.Library()
	if err != nil {
		t.Fatal(err)
	}
	inLib := map[string]msl.Kernel{}
	var libNames []string
	for _, k := range lib {
		inLib[k.Name] = k
		libNames = append(libNames, k.Name)
	}
	host := KernelNames()
	for _, n := range host {
		k, ok := inLib[n]
		if !ok {
			t.Errorf("the host can ask for %s, which no .metal file instantiates", n)
			continue
		}
		if want := kernelFamily(n) + ".metal"; k.File != want {
			t.Errorf("%s is in %s, want %s (the family's file)", n, k.File, want)
		}
	}
	sort.Strings(libNames)
	sorted := slices.Clone(host)
	sort.Strings(sorted)
	if !slices.Equal(sorted, libNames) {
		t.Errorf("host names %v\nlibrary names %v", sorted, libNames)
	}
	if len(host) != len(lib) {
		t.Errorf("the host builds %d names, the library has %d kernels", len(host), len(lib))
	}
}

var localThreadgroupRE = regexp.MustCompile(`(?m)^\s+threadgroup\s+\w+\s+\w+\s*\[`)

// TestKernelConventions checks the rules the emulator and the encoder rely
// on: buffer(0) is the args struct, threadgroup memory is a parameter and
// never a local array, and names follow <family>_<variant>_<dtype>.
func TestKernelConventions(t *testing.T) {
	lib, err := msl.Library()
	if err != nil {
		t.Fatal(err)
	}
	nameRE := regexp.MustCompile(`^[a-z]+_[a-z0-9]+_(f32|f16|bf16|i32)$`)
	for _, k := range lib {
		if !nameRE.MatchString(k.Name) {
			t.Errorf("%s: name is not <family>_<variant>_<dtype>", k.Name)
		}
		if len(k.Params) == 0 || k.Params[0].Attr != "buffer" || k.Params[0].Index != 0 ||
			!strings.HasPrefix(k.Params[0].Decl, "constant ") || !strings.Contains(k.Params[0].Decl, "Args") {
			t.Errorf("%s: buffer(0) must be the constant args struct, have %+v", k.Name, k.Params[0])
		}
		for _, p := range k.Params {
			if p.Attr == "threadgroup" && !strings.HasPrefix(p.Decl, "threadgroup ") {
				t.Errorf("%s: threadgroup(%d) parameter %q is not a threadgroup pointer", k.Name, p.Index, p.Decl)
			}
		}
	}
	for _, f := range msl.Files() {
		src, _ := msl.Raw(f)
		if m := localThreadgroupRE.FindString(src); m != "" {
			t.Errorf("%s declares threadgroup memory locally (%q): make it a kernel parameter", f, strings.TrimSpace(m))
		}
	}
}

// The class is the architecture name's last letter as Apple uses it: "s"
// is a Pro (applegpu_g14s is the M2 Pro, g16s the M4 Pro), "c" a Max.
func TestDeviceClass(t *testing.T) {
	for _, c := range []struct {
		info DeviceInfo
		want byte
	}{
		{DeviceInfo{Name: "Apple M1", Architecture: "applegpu_g13g"}, classBase},
		{DeviceInfo{Name: "Apple M2 Pro", Architecture: "applegpu_g14s"}, classPro},
		{DeviceInfo{Name: "Apple M4 Pro", Architecture: "applegpu_g16s"}, classPro},
		{DeviceInfo{Name: "Apple M1 Max", Architecture: "applegpu_g13c"}, classMax},
		{DeviceInfo{Name: "Apple M2 Ultra", Architecture: "applegpu_g14d"}, classUltra},
		{DeviceInfo{Name: "Apple A15 GPU", Architecture: "applegpu_g14p"}, classPhone},
		// Without a known architecture, the marketing name.
		{DeviceInfo{Name: "Apple M3 Max"}, classMax},
		{DeviceInfo{Name: "Apple M3 Pro", Architecture: "applegpu_g15x"}, classPro},
		{DeviceInfo{Name: "Apple M1 Ultra"}, classUltra},
		{DeviceInfo{Name: "Apple M4"}, classBase},
		{DeviceInfo{Name: "fake (CPU reference)", Architecture: "fake_g"}, classBase},
	} {
		if got := deviceClass(c.info); got != c.want {
			t.Errorf("deviceClass(%s, %q) = %c, want %c", c.info.Name, c.info.Architecture, got, c.want)
		}
	}
}
