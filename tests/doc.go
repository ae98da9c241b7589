// Package tests holds the end-to-end suites: tests that cross packages and
// check what a user sees. The redrafter binary is built once and run as a
// user runs it, against golden outputs; greedy ReDrafter is checked against
// greedy decoding, token for token, through every backend that runs here;
// and the import graph is checked against the layers of
// docs/ARCHITECTURE.md. Unit tests stay beside their code.
package tests
