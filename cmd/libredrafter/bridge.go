//go:build cgo

package main

/*
#include "redrafter.h"

// Go cannot call a C function pointer; this C function does. It lives in a
// file without //export, whose preamble may hold definitions.
static inline int32_t rd_call_token_callback(rd_token_callback cb, const char *piece, size_t len, void *user_data) {
	return cb(piece, len, user_data);
}
*/
import "C"

import "unsafe"

// callToken calls the app's token callback.
func callToken(cb C.rd_token_callback, piece *C.char, n C.size_t, user unsafe.Pointer) C.int32_t {
	return C.rd_call_token_callback(cb, piece, n, user)
}
