package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed9b8f47b1/redrafter"
)

// Defaults of the limits a Config leaves at zero.
const (
	DefaultMaxBodyBytes      = 4 << 20
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 60 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultShutdownTimeout   = 10 * time.Second
)

// Config describes a server over one loaded Engine.
type Config struct {
	Engine *redrafter.Engine
	// ModelName is the model's id in /v1/models; requests may name it or
	// leave "model" empty. Required.
	ModelName string
	// Template is the chat template that renders messages: "model" (the
	// model's own) or a built-in one (tokenizer.TemplateVicuna, ...), as
	// redrafter.ChatOptions.Template names them. Required.
	Template string
	// Draft are the ReDrafter options of every generation (when the Engine
	// has a draft head).
	Draft redrafter.DraftOptions
	// Parallel is the number of slots: sequences decoding at once, each
	// with a KV cache of Engine.Context() tokens (0: 1).
	Parallel int
	// Queue is how many requests may wait for a slot; more are refused at
	// once with 429 (0: none wait).
	Queue int
	// APIKey, when set, is required as "Authorization: Bearer KEY" on every
	// route but /health.
	APIKey string
	// CORSOrigins are the browser origins allowed to call the API ("*":
	// any); none by default.
	CORSOrigins []string
	// AllowedHosts are the names, besides IP addresses and localhost, that
	// requests may give as Host (a reverse proxy's public name); "*" allows
	// any. Other names are refused with 403 (security.go).
	AllowedHosts []string
	// MaxBodyBytes bounds a request body (0: DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout are http.Server's
	// (0: the defaults above). WriteTimeout bounds each write of a
	// response, so a client that stops reading a stream is cut off and its
	// slot freed; the generation itself may take as long as it needs.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// ShutdownTimeout is how long Serve lets in-flight requests finish
	// after its context ends before it cancels them (0: the default).
	ShutdownTimeout time.Duration
	// Logger receives request errors, panics and lifecycle lines (nil:
	// slog.Default()).
	Logger *slog.Logger
}

// Server answers the OpenAI API over one Engine. Create it with New, serve
// with Serve (or mount Handler), and Close it after Serve returns.
type Server struct {
	cfg     Config
	e       *redrafter.Engine
	log     *slog.Logger
	slots   []*slot
	sched   *scheduler
	group   *redrafter.Group // the slots' sessions decode in its shared passes
	metrics *metrics
	handler http.Handler
	hosts   *hostPolicy
	keyHash [sha256.Size]byte
	created int64
	// base is the parent context of every request; cancelling it stops
	// generations (shutdown after the grace period).
	base       context.Context
	cancelBase context.CancelCauseFunc
	closeOnce  sync.Once
	// atRest gives freed memory back to the OS once no request has been
	// admitted for restTime (see New); rests counts the times it did.
	atRest *time.Timer
	rests  atomic.Int64
	// maxTokenBytes bounds the prompt bytes one token stands for (0: no
	// bound known), so that a prompt can be refused by its length before
	// it is tokenized (promptTooLong).
	maxTokenBytes int

	// Hooks for tests: called after a slot is taken and after each piece
	// of text, on the request's goroutine.
	testAcquired func(ctx context.Context)
	testText     func(ctx context.Context)
}

// restTime is how long the server waits without a request before it
// returns freed memory to the OS: longer than the group's 2 s before it
// frees its compiled passes. A variable for tests.
var restTime = 3 * time.Second

// errShutdown cancels the requests still running when the shutdown grace
// period ends.
var errShutdown = errors.New("server: shutting down")

// New checks cfg and allocates the slots' sessions.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Engine == nil:
		return nil, errors.New("server: no engine")
	case cfg.ModelName == "":
		return nil, errors.New("server: no model name")
	case cfg.Parallel < 0:
		return nil, fmt.Errorf("server: parallel %d: want 1 or more slots", cfg.Parallel)
	case cfg.Queue < 0:
		return nil, fmt.Errorf("server: queue %d: want 0 or more", cfg.Queue)
	}
	// A template name the engine does not know, or a model template that
	// does not compile or render, fails here rather than on every request.
	if _, err := cfg.Engine.ChatTokens([]redrafter.Message{{Role: "user", Content: "Hello"}}, cfg.Template); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	// A beam that cannot fit the context would fail every request.
	if err := cfg.Engine.CheckDraft(cfg.Draft); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	hosts, err := newHostPolicy(cfg.AllowedHosts)
	if err != nil {
		return nil, err
	}
	cfg.Parallel = max(cfg.Parallel, 1)
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&cfg.ReadTimeout, DefaultReadTimeout)
	def(&cfg.WriteTimeout, DefaultWriteTimeout)
	def(&cfg.IdleTimeout, DefaultIdleTimeout)
	def(&cfg.ShutdownTimeout, DefaultShutdownTimeout)
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, e: cfg.Engine, log: cfg.Logger, metrics: newMetrics(cfg.Parallel), created: time.Now().Unix(),
		hosts: hosts, maxTokenBytes: maxTokenBytes(cfg.Engine.Tokenizer())}
	s.base, s.cancelBase = context.WithCancelCause(context.Background())
	if cfg.APIKey != "" {
		s.keyHash = sha256.Sum256([]byte(cfg.APIKey))
	}
	s.group = cfg.Engine.NewGroup()
	for i := range cfg.Parallel {
		sess, err := s.newSlotSession()
		if err != nil {
			for _, sl := range s.slots {
				sl.session.Close()
			}
			s.group.Close()
			return nil, err
		}
		s.slots = append(s.slots, &slot{id: i, session: sess})
	}
	// A burst of requests leaves garbage (request buffers, a long prompt's
	// tokenization, the group's compiled passes, which it frees after 2 s
	// idle) that a server at rest would otherwise hold until the runtime's
	// next collection, minutes later: once no request has been admitted for
	// restTime, collect and return it to the OS, so the process is back at
	// its baseline memory after a load.
	s.atRest = time.AfterFunc(time.Hour, func() {
		debug.FreeOSMemory()
		s.rests.Add(1)
	})
	s.atRest.Stop()
	s.sched = newScheduler(slices.Clone(s.slots), cfg.Queue, func(queued, busy, admitted int) {
		s.metrics.queueDepth.Set(float64(queued))
		s.metrics.slotsBusy.Set(float64(busy))
		if admitted == 0 {
			s.atRest.Reset(restTime)
		} else {
			s.atRest.Stop()
		}
	})
	s.metrics.reg.MustRegister(newProtocolCollector(s.sched, cfg.Parallel, cfg.Engine.Context()))
	s.handler = s.routes()
	return s, nil
}

// newSlotSession makes the Session a slot decodes with: a member of the
// server's Group, so that the slots generating at the same time share their
// forward passes (continuous batching; each slot's tokens are what it would
// produce alone).
func (s *Server) newSlotSession() (*redrafter.Session, error) {
	return s.group.NewSession()
}

// Handler is the server's http.Handler (every route and middleware).
func (s *Server) Handler() http.Handler { return s.handler }

// Serve answers requests on ln until ctx ends, then shuts down: it stops
// accepting, lets in-flight requests finish for Config.ShutdownTimeout,
// cancels those still running (a generation stops within a step), waits for
// them and returns nil. It serves through a Front (probes.go), so /livez,
// /readyz, /health and /metrics need no API key. The Server stays usable
// until Close.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	f := NewFront(FrontConfig{
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout, ReadTimeout: s.cfg.ReadTimeout, IdleTimeout: s.cfg.IdleTimeout,
		ShutdownTimeout: s.cfg.ShutdownTimeout, Logger: s.log,
	})
	f.Attach(s)
	return f.Serve(ctx, ln)
}

// Close cancels what still runs and frees the slots' sessions; call it after
// Serve returned (or once no request uses Handler any more).
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.cancelBase(errShutdown)
		s.atRest.Stop()
		s.sched.closeAll()
		s.group.Close()
	})
}

// routes builds the mux and wraps it in the middleware, outermost first:
// panic recovery and the request counter, the Host check, CORS, the API
// key, JSON bodies on POST (security.go).
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("POST /v1/completions", s.handleCompletion)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /v1/models/{model...}", s.handleModel)
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.Handle("GET /metrics", s.metricsHandler())
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("POST /detokenize", s.handleDetokenize)
	return s.recoverer(s.checkHost(s.cors(s.auth(requireJSON(jsonMuxErrors(mux))))))
}

// endpoints are the paths counted by name in the metrics; others count as
// "other" so that scanners cannot grow the label set.
var endpoints = []string{"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/tokenize", "/detokenize"}

func endpointLabel(path string) string {
	if slices.Contains(endpoints, path) {
		return path
	}
	if strings.HasPrefix(path, "/v1/models/") {
		return "/v1/models/{model}"
	}
	return "other"
}

// recordingWriter remembers the status written, for the request counter
// and for knowing whether a panic can still be answered with a 500.
type recordingWriter struct {
	http.ResponseWriter
	status int
}

func (w *recordingWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes,
// write deadlines).
func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// recoverer answers a panicking request with a 500 (when nothing was sent
// yet) and logs it with its stack; the server goes on. It also counts each
// request by endpoint and status.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &recordingWriter{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("panic serving a request", "method", r.Method, "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
				if rw.status == 0 {
					writeError(rw, &apiError{status: http.StatusInternalServerError, kind: "server_error", code: "internal_error",
						message: "internal error (a bug in the server; it was logged)"})
				}
			}
			status := rw.status
			if status == 0 {
				status = http.StatusOK
			}
			s.metrics.requests.WithLabelValues(endpointLabel(r.URL.Path), fmt.Sprint(status)).Inc()
		}()
		next.ServeHTTP(rw, r)
	})
}

// cors answers browsers from the configured origins only: their requests
// get Access-Control-Allow-Origin, their preflights a 204; a preflight from
// any other origin is refused (403), and other origins' requests get no
// CORS headers, so a browser keeps their answers from the page.
func (s *Server) cors(next http.Handler) http.Handler {
	anyOrigin := slices.Contains(s.cfg.CORSOrigins, "*")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		allowed := origin != "" && (anyOrigin || slices.Contains(s.cfg.CORSOrigins, origin))
		if origin != "" {
			w.Header().Add("Vary", "Origin")
		}
		if allowed {
			w.Header().Set("Access-Control-Allow-Origin", origin)
		}
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			if !allowed {
				writeError(w, &apiError{status: http.StatusForbidden, kind: "invalid_request_error", code: "cors_origin_not_allowed",
					message: fmt.Sprintf("origin %q is not allowed (start the server with --cors-origin)", origin)})
				return
			}
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
			w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
			w.Header().Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// auth requires the API key, when one is set, on every route but /health.
// The key is compared through its SHA-256 in constant time, so neither its
// bytes nor its length leak through response times.
func (s *Server) auth(next http.Handler) http.Handler {
	if s.cfg.APIKey == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			next.ServeHTTP(w, r)
			return
		}
		given, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		h := sha256.Sum256([]byte(given))
		if !ok || subtle.ConstantTimeCompare(h[:], s.keyHash[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="redrafter"`)
			msg := "incorrect API key"
			if !ok {
				msg = "missing API key: send Authorization: Bearer KEY"
			}
			writeError(w, &apiError{status: http.StatusUnauthorized, kind: "invalid_request_error", code: "invalid_api_key", message: msg})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// jsonMuxErrors answers the mux's own 404 (no route) and 405 (a route,
// another method) with OpenAI's error body instead of plain text.
func jsonMuxErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		probe := &statusOnly{header: http.Header{}}
		mux.ServeHTTP(probe, r)
		status := probe.status
		if status == 0 || status == http.StatusOK {
			status = http.StatusNotFound
		}
		if allow := probe.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		e := &apiError{status: status, kind: "invalid_request_error", code: "not_found", message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)}
		if status == http.StatusMethodNotAllowed {
			e.code, e.message = "method_not_allowed", fmt.Sprintf("%s does not take %s (allowed: %s)", r.URL.Path, r.Method, probe.header.Get("Allow"))
		}
		writeError(w, e)
	})
}

// statusOnly is a ResponseWriter that keeps the status and headers of the
// mux's error answer and drops its text body.
type statusOnly struct {
	header http.Header
	status int
}

func (s *statusOnly) Header() http.Header         { return s.header }
func (s *statusOnly) Write(b []byte) (int, error) { return len(b), nil }
func (s *statusOnly) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
}

// writeJSON sends v with status and Content-Type: application/json (the
// official Go client refuses a response without it).
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := encodeJSON(v)
	if err != nil {
		panic(fmt.Sprintf("server: encoding a response: %v", err)) // our bug: recoverer answers 500
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

func writeError(w http.ResponseWriter, err *apiError) {
	if err.status == http.StatusTooManyRequests || err.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, err.status, err.body())
}
