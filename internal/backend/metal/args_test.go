package metal

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	core "github.com/seed9b8f47b1/redrafter/internal/backend/emu"

	msl "github.com/seed9b8f47b1/redrafter/internal/backend/metal/shaders"
)

var (
	structRE = regexp.MustCompile(`(?s)struct\s+(\w+)\s*\{(.*?)\};`)
	fieldRE  = regexp.MustCompile(`(?m)^\s*(int|uint|float)\s+(\w+);`)
	defineRE = regexp.MustCompile(`(?m)^#define\s+(\w+)\s+(\d+)\s*$`)
)

// TestArgsLayout compiles args.h and checks that every struct and constant
// has a Go mirror with the same size, field order and offsets.
func TestArgsLayout(t *testing.T) {
	cxx, err := core.Compiler()
	core.Require(t, err) // skips (or fails in CI) without clang
	hdr, err := msl.Raw("args.h")
	if err != nil {
		t.Fatal(err)
	}
	var prog strings.Builder
	prog.WriteString("#include <cstdio>\n#include <cstddef>\n#include \"args.h\"\nint main() {\n")
	structs := structRE.FindAllStringSubmatch(hdr, -1)
	fields := map[string][]string{}
	for _, s := range structs {
		name := s[1]
		fmt.Fprintf(&prog, "\tprintf(\"%s %%zu\", sizeof(%s));\n", name, name)
		for _, f := range fieldRE.FindAllStringSubmatch(s[2], -1) {
			fields[name] = append(fields[name], f[2])
			fmt.Fprintf(&prog, "\tprintf(\" %%zu\", offsetof(%s, %s));\n", name, f[2])
		}
		prog.WriteString("\tprintf(\"\\n\");\n")
	}
	defines := defineRE.FindAllStringSubmatch(hdr, -1)
	for _, d := range defines {
		fmt.Fprintf(&prog, "\tprintf(\"#%s %%d\\n\", %s);\n", d[1], d[1])
	}
	prog.WriteString("}\n")
	dir := t.TempDir()
	for name, data := range map[string]string{"args.h": hdr, "main.cpp": prog.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "layout")
	if out, err := exec.Command(cxx, "-std=c++20", "-o", bin, filepath.Join(dir, "main.cpp")).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if strings.HasPrefix(f[0], "#") {
			name := f[0][1:]
			v, _ := strconv.Atoi(f[1])
			seen[name] = true
			if got, ok := argConstants[name]; !ok || got != v {
				t.Errorf("%s = %d in args.h, Go mirror has %d (present: %v)", name, v, got, ok)
			}
			continue
		}
		name := f[0]
		seen[name] = true
		goVal, ok := argStructs[name]
		if !ok {
			t.Errorf("args.h struct %s has no Go mirror", name)
			continue
		}
		typ := reflect.TypeOf(goVal)
		size, _ := strconv.Atoi(f[1])
		if int(typ.Size()) != size {
			t.Errorf("%s: %d bytes in C, %d in Go", name, size, typ.Size())
		}
		if typ.NumField() != len(f)-2 {
			t.Errorf("%s: %d fields in C %v, %d in Go", name, len(f)-2, fields[name], typ.NumField())
			continue
		}
		for i := 0; i < typ.NumField(); i++ {
			off, _ := strconv.Atoi(f[2+i])
			gf := typ.Field(i)
			if int(gf.Offset) != off || !strings.EqualFold(gf.Name, fields[name][i]) || gf.Type.Size() != 4 {
				t.Errorf("%s field %d: C %s at %d, Go %s (%v) at %d", name, i, fields[name][i], off, gf.Name, gf.Type, gf.Offset)
			}
		}
	}
	for name := range argStructs {
		if !seen[name] {
			t.Errorf("Go mirror %s has no struct in args.h", name)
		}
	}
	for name := range argConstants {
		if !seen[name] {
			t.Errorf("Go constant %s has no #define in args.h", name)
		}
	}
}
