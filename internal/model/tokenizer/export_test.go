package tokenizer

// Exported for the tests in package tokenizer_test (gguf_test.go).
var CheckConformance = checkConformance
