package emu

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Apple's Metal compiler refuses C++ that clang compiles without a word:
// recursion, function pointers (outside [[visible]] functions and function
// tables, which this library does not use) and lambda expressions. The
// emulator finds them in the LLVM IR that clang's front end makes of the
// kernel file before any optimisation (-disable-llvm-passes: nothing is
// inlined, no recursion is turned into a loop yet), looking only at the
// functions whose debug location is the kernel file itself, not the shim:
//
//   - recursion: a cycle of direct calls among those functions;
//   - function pointers: an indirect call, or a function used as a value
//     (its address passed, stored or compared) rather than called;
//   - lambdas: a closure object (%class.anon, the type clang gives every
//     lambda's closure), made even when the lambda is never called.
//
// Uninstantiated templates make no IR, so a template that is never
// instantiated is not checked; every kernel is instantiated.

var (
	irFileRE = regexp.MustCompile(`^!(\d+) = !DIFile\(filename: "([^"]*)"`)
	irSubRE  = regexp.MustCompile(`^!(\d+) = distinct !DISubprogram\(name: "([^"]*)".*?\bfile: !(\d+), line: (\d+)`)
	// define ... @name(...) ... !dbg !N {
	irDefineRE  = regexp.MustCompile(`^define\b.*?@("[^"]+"|[-\w.$]+)\(.*!dbg !(\d+) \{$`)
	irDeclareRE = regexp.MustCompile(`^declare\b.*?@("[^"]+"|[-\w.$]+)\(`)
	// The callee of a call: the first @ or % operand followed by "(" (a
	// return type such as %struct.S is followed by a space).
	irCallRE     = regexp.MustCompile(`\b(?:call|invoke)\b[^@%(]*?([@%])("[^"]+"|[-\w.$]+)\(`)
	irGlobalRE   = regexp.MustCompile(`@("[^"]+"|[-\w.$]+)(\(?)`)
	irClosureRE  = regexp.MustCompile(`%class\.anon\b`)
	irLocationRE = regexp.MustCompile(`!dbg !(\d+)`)
)

type irFunc struct {
	name, symbol string // source name, IR symbol
	line         int
	body         []string
}

// checkIR reports the first construct of file (the kernel file's name, as
// its #line directive gives it) in the IR ll that Metal does not allow.
func checkIR(file, ll string) error {
	files := map[string]string{}
	type sub struct {
		name, file string
		line       int
	}
	subs := map[string]sub{}
	lines := strings.Split(ll, "\n")
	for _, l := range lines {
		if m := irFileRE.FindStringSubmatch(l); m != nil {
			files[m[1]] = m[2]
		}
	}
	for _, l := range lines {
		if m := irSubRE.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[4])
			subs[m[1]] = sub{m[2], files[m[3]], n}
		}
	}
	funcs := map[string]bool{}   // every function the IR defines or declares
	mine := map[string]*irFunc{} // those defined in file, by symbol
	var order []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := irDeclareRE.FindStringSubmatch(l); m != nil {
			funcs[m[1]] = true
			continue
		}
		m := irDefineRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		funcs[m[1]] = true
		s, ok := subs[m[2]]
		j := i + 1
		for j < len(lines) && lines[j] != "}" {
			j++
		}
		if ok && s.file == file {
			mine[m[1]] = &irFunc{name: s.name, symbol: m[1], line: s.line, body: lines[i+1 : j]}
			order = append(order, m[1])
		}
		i = j
	}
	refuse := func(f *irFunc, what string, args ...any) error {
		return fmt.Errorf("emu: %s:%d: %s: %s", file, f.line, f.name, fmt.Sprintf(what, args...))
	}
	calls := map[string][]string{}
	for _, sym := range order {
		f := mine[sym]
		for _, l := range f.body {
			if irClosureRE.MatchString(l) {
				return refuse(f, "makes a lambda expression, which Metal does not allow")
			}
			callee := ""
			if m := irCallRE.FindStringSubmatch(l); m != nil {
				if m[1] == "%" {
					return refuse(f, "calls through a function pointer, which Metal does not allow")
				}
				callee = m[2]
				if _, ok := mine[callee]; ok {
					calls[sym] = append(calls[sym], callee)
				}
			}
			// Any other use of a function is as a value: a function pointer.
			for _, m := range irGlobalRE.FindAllStringSubmatch(irLocationRE.ReplaceAllString(l, ""), -1) {
				if funcs[m[1]] && !(m[1] == callee && m[2] == "(") {
					name := m[1]
					if g, ok := mine[name]; ok {
						name = g.name
					}
					return refuse(f, "uses function %s as a value (a function pointer), which Metal does not allow", name)
				}
			}
		}
	}
	// Recursion: a cycle of calls among the file's functions.
	const (
		unseen = iota
		active
		finished
	)
	state := map[string]int{}
	var path []string
	var visit func(sym string) error
	visit = func(sym string) error {
		state[sym] = active
		path = append(path, sym)
		for _, c := range calls[sym] {
			switch state[c] {
			case active:
				i := len(path) - 1
				for path[i] != c {
					i--
				}
				var names []string
				for _, s := range append(path[i:], c) {
					names = append(names, mine[s].name)
				}
				return refuse(mine[c], "is recursive (%s), which Metal does not allow", strings.Join(names, " → "))
			case unseen:
				if err := visit(c); err != nil {
					return err
				}
			}
		}
		path = path[:len(path)-1]
		state[sym] = finished
		return nil
	}
	sort.Strings(order)
	for _, sym := range order {
		if state[sym] == unseen {
			if err := visit(sym); err != nil {
				return err
			}
		}
	}
	return nil
}
