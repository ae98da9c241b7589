// Package shaders holds the Metal Shading Language kernels of the Metal
// backend, one file per op family, and reads them: the sources the device
// compiles (with their #include "..." lines inlined, since
// newLibraryWithSource has no include path) and the kernels each file
// instantiates, with the binding of every parameter.
//
// The conventions every kernel follows (checked by the tests of package
// metal and internal/backend/metal/emu): buffer(0) is the kernel's argument struct from
// args.h; threadgroup memory is always a parameter ([[threadgroup(0)]]),
// never a local array, so the CPU emulation can share it between threads;
// each file ends with an instantiation block of
// instantiate_kernel("<family>_<variant>_<dtype>", function, template args).
package shaders

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

//go:embed *.metal *.h
var files embed.FS

// Files lists the kernel files (*.metal), sorted.
func Files() []string {
	names, err := fs.Glob(files, "*.metal")
	if err != nil {
		panic(err)
	}
	sort.Strings(names)
	return names
}

// Raw returns a file of this folder as written (a .metal file or a header).
func Raw(name string) (string, error) {
	b, err := files.ReadFile(name)
	if err != nil {
		return "", fmt.Errorf("shaders/metal: %w", err)
	}
	return string(b), nil
}

var includeRE = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*include[ \t]+"([^"]+)"[ \t]*$`)

// Source returns a kernel file with its #include "..." lines replaced by the
// headers they name (each header once), ready for newLibraryWithSource.
func Source(name string) (string, error) {
	raw, err := Raw(name)
	if err != nil {
		return "", err
	}
	return Inline(name, raw, Raw)
}

// Inline expands #include "x" lines of src, reading headers with read. A
// header is inserted the first time it is included and dropped after that.
func Inline(name, src string, read func(string) (string, error)) (string, error) {
	seen := map[string]bool{}
	var expand func(name, src string, depth int) (string, error)
	expand = func(name, src string, depth int) (string, error) {
		if depth > 8 {
			return "", fmt.Errorf("shaders/metal: %s: includes nested too deeply", name)
		}
		var firstErr error
		out := includeRE.ReplaceAllStringFunc(src, func(line string) string {
			inc := includeRE.FindStringSubmatch(line)[1]
			if seen[inc] {
				return "// " + strings.TrimSpace(line) + " (already included)"
			}
			seen[inc] = true
			body, err := read(inc)
			if err == nil {
				body, err = expand(inc, body, depth+1)
			}
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("shaders/metal: %s: %w", name, err)
				}
				return line
			}
			body = strings.ReplaceAll(body, "#pragma once\n", "")
			return "// begin " + inc + "\n" + body + "// end " + inc
		})
		return out, firstErr
	}
	return expand(name, src, 0)
}

// Kernel is one host-visible kernel: an instantiation of a template kernel
// function with its parameters.
type Kernel struct {
	Name         string // host name, e.g. "matvec_nt_f16"
	File         string // e.g. "matvec.metal"
	Func         string // template function, e.g. "matvec_nt"
	TemplateArgs string // e.g. "half"
	Params       []Param
}

// Param is one kernel parameter and where it is bound from.
type Param struct {
	Decl  string // the declaration without the attribute, e.g. "device const float *x"
	Name  string // e.g. "x"
	Attr  string // "buffer", "threadgroup", or a built-in such as "thread_position_in_grid"
	Index int    // the buffer or threadgroup index; 0 for built-ins
}

var (
	instRE  = regexp.MustCompile(`(?m)^[ \t]*instantiate_kernel\(\s*"([A-Za-z0-9_]+)"\s*,\s*([A-Za-z_]\w*)\s*(?:,\s*([^)]*))?\)[ \t]*;?[ \t]*$`)
	kfuncRE = regexp.MustCompile(`\bkernel\s+void\s+([A-Za-z_]\w*)\s*\(`)
	attrRE  = regexp.MustCompile(`\[\[\s*([A-Za-z_]\w*)\s*(?:\(\s*(\d+)\s*\))?\s*\]\]`)
)

// Parse reads the kernels that a kernel file instantiates.
func Parse(file, src string) ([]Kernel, error) {
	funcs := map[string][]Param{}
	for _, m := range kfuncRE.FindAllStringSubmatchIndex(src, -1) {
		name := src[m[2]:m[3]]
		open := m[1] - 1
		closeAt := matching(src, open)
		if closeAt < 0 {
			return nil, fmt.Errorf("shaders/metal: %s: kernel %s: unbalanced parameter list", file, name)
		}
		params, err := parseParams(src[open+1 : closeAt])
		if err != nil {
			return nil, fmt.Errorf("shaders/metal: %s: kernel %s: %w", file, name, err)
		}
		funcs[name] = params
	}
	var ks []Kernel
	seen := map[string]bool{}
	for _, m := range instRE.FindAllStringSubmatch(src, -1) {
		name, fn, targs := m[1], m[2], strings.TrimSpace(m[3])
		params, ok := funcs[fn]
		if !ok {
			return nil, fmt.Errorf("shaders/metal: %s: %s instantiates unknown kernel function %s", file, name, fn)
		}
		if seen[name] {
			return nil, fmt.Errorf("shaders/metal: %s: kernel %s instantiated twice", file, name)
		}
		seen[name] = true
		ks = append(ks, Kernel{Name: name, File: file, Func: fn, TemplateArgs: targs, Params: params})
	}
	return ks, nil
}

// Library parses every kernel file.
func Library() ([]Kernel, error) {
	var all []Kernel
	names := map[string]string{}
	for _, f := range Files() {
		src, err := Raw(f)
		if err != nil {
			return nil, err
		}
		ks, err := Parse(f, src)
		if err != nil {
			return nil, err
		}
		for _, k := range ks {
			if other, dup := names[k.Name]; dup {
				return nil, fmt.Errorf("shaders/metal: kernel %s is in both %s and %s", k.Name, other, f)
			}
			names[k.Name] = f
		}
		all = append(all, ks...)
	}
	return all, nil
}

// matching returns the index of the parenthesis closing the one at open.
func matching(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func parseParams(list string) ([]Param, error) {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(list); i++ {
		switch list[i] {
		case '(', '<', '[':
			depth++
		case ')', '>', ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, list[start:i])
				start = i + 1
			}
		}
	}
	parts = append(parts, list[start:])
	var ps []Param
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		am := attrRE.FindStringSubmatch(p)
		if am == nil {
			return nil, fmt.Errorf("parameter %q has no [[attribute]]", p)
		}
		decl := strings.TrimSpace(attrRE.ReplaceAllString(p, ""))
		fields := strings.FieldsFunc(decl, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '*' || r == '&' })
		if len(fields) < 2 {
			return nil, fmt.Errorf("parameter %q has no name", p)
		}
		idx := 0
		if am[2] != "" {
			idx, _ = strconv.Atoi(am[2])
		}
		switch am[1] {
		case "buffer", "threadgroup":
			if am[2] == "" {
				return nil, fmt.Errorf("parameter %q: [[%s]] needs an index", p, am[1])
			}
		}
		ps = append(ps, Param{Decl: decl, Name: fields[len(fields)-1], Attr: am[1], Index: idx})
	}
	return ps, nil
}
