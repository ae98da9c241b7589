// Package server answers the OpenAI HTTP API (chat completions, completions,
// models) over a loaded redrafter.Engine, with ReDrafter speculative
// decoding, for the apps, editors and scripts that talk to local models
// through that API. docs/SERVER.md lists the endpoints, fields, limits and
// metrics.
//
// Requests decode in slots (Config.Parallel), each holding a Session whose
// KV cache outlives the request: a new request takes the idle slot whose
// cached tokens share the longest prefix with its prompt, so a chat's next
// turn runs only what is new. Requests beyond the slots wait in a bounded
// queue (Config.Queue); beyond it they are refused at once with 429. A
// client that disconnects, or stops reading a stream, cancels its
// generation within a step and frees its slot.
//
// The server is built on net/http alone: the method-pattern ServeMux,
// http.MaxBytesReader for bodies, http.ResponseController for per-write
// deadlines and flushes. Metrics are Prometheus text (client_golang).
package server
