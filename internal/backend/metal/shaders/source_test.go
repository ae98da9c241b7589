package shaders

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

func TestSourceInlinesHeadersOnce(t *testing.T) {
	for _, f := range Files() {
		src, err := Source(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(src, `#include "`) {
			t.Errorf("%s: an #include \"...\" is left after inlining", f)
		}
		if n := strings.Count(src, "// begin args.h"); n != 1 {
			t.Errorf("%s: args.h inlined %d times", f, n)
		}
	}
	if _, err := Inline("x.metal", `#include "missing.h"`, Raw); err == nil {
		t.Error("a missing header was not reported")
	}
}

func TestParse(t *testing.T) {
	const src = `
template <typename T, int Op>
kernel void k(constant A &args [[buffer(0)]], device const T *x [[ buffer(1) ]],
		threadgroup float *sh [[threadgroup(0)]], uint3 g [[threadgroup_position_in_grid]]) {}
instantiate_kernel("fam_var_f32", k, float, 1)
`
	ks, err := Parse("t.metal", src)
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) != 1 || ks[0].Name != "fam_var_f32" || ks[0].Func != "k" || ks[0].TemplateArgs != "float, 1" {
		t.Fatalf("Parse = %+v", ks)
	}
	want := []Param{
		{"constant A &args", "args", "buffer", 0},
		{"device const T *x", "x", "buffer", 1},
		{"threadgroup float *sh", "sh", "threadgroup", 0},
		{"uint3 g", "g", "threadgroup_position_in_grid", 0},
	}
	for i, p := range ks[0].Params {
		if p != want[i] {
			t.Errorf("param %d = %+v, want %+v", i, p, want[i])
		}
	}
	for _, bad := range []string{
		`instantiate_kernel("a_b_f32", nope, float)`,
		"kernel void k(device float *x) {}\ninstantiate_kernel(\"a_b_f32\", k, float)",
	} {
		if _, err := Parse("bad.metal", bad); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

// MSL is C++14 without lambdas, goto, new/delete, virtual functions,
// exceptions, RTTI, thread_local or register (MSL specification §1.5.4).
// The emulator compiles our kernels as C++20 and would accept all of these,
// so they are refused here.
func TestNoCxxOnlyFeatures(t *testing.T) {
	comments := regexp.MustCompile(`(?s)//[^\n]*|/\*.*?\*/`)
	lambda := regexp.MustCompile(`\[[&=]?[\w\s,&]*\]\s*(\([^)]*\)\s*)?(mutable\s*)?\{|\[[&=][\w\s,&]*\]\s*\(`)
	keyword := regexp.MustCompile(`\b(goto|new|delete|virtual|throw|try|catch|dynamic_cast|typeid|thread_local|register)\b`)
	names, err := fs.Glob(files, "*")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range names {
		if !strings.HasSuffix(f, ".metal") && !strings.HasSuffix(f, ".h") {
			continue
		}
		raw, err := Raw(f)
		if err != nil {
			t.Fatal(err)
		}
		code := comments.ReplaceAllString(raw, "")
		if m := lambda.FindString(code); m != "" {
			t.Errorf("%s: %q looks like a lambda, which MSL does not have", f, m)
		}
		if m := keyword.FindString(code); m != "" {
			t.Errorf("%s: %q is not in MSL", f, m)
		}
	}
	// The checks must see what they look for.
	for _, bad := range []string{"auto f = [&](int r) { return r; };", "goto out;", "auto f = [=](int r) {"} {
		if !lambda.MatchString(bad) && !keyword.MatchString(bad) {
			t.Errorf("%q not caught", bad)
		}
	}
}
