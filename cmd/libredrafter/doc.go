// Command libredrafter is the C library of redrafter: built with
// -buildmode=c-shared or -buildmode=c-archive it implements redrafter.h
// (in this directory) over the public Go API, so that C, C++ and Swift
// apps can embed the runtime in their own process. `make lib` builds
// bin/lib/libredrafter.so, bin/lib/libredrafter.a and copies redrafter.h
// beside them; docs/EMBEDDING.md gives the macOS commands.
//
// This is the only cgo in the repository. Objects cross the boundary as
// runtime/cgo handles checked against a registry of live ones, so a freed
// or forged handle is an error status rather than a crash; every exported
// function recovers panics into RD_ERR_INTERNAL. Built without cgo, the
// program only says that it needs cgo.
package main
