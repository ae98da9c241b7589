package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Front is what a `redrafter serve` process answers on its listener from
// before its model loads until it exits: Kubernetes' probes, apart, and the
// Server once it is attached.
//
//   - GET /livez: 200 as long as the process serves HTTP (liveness: a
//     failure means restart it).
//   - GET /readyz: 200 once a Server is attached, 503 while the model loads,
//     while draining after shutdown began, and, with UnreadyWhenFull, while
//     every slot is busy and the queue is full (readiness: a failure means
//     send it no new requests).
//   - GET /health: the Server's, or 503 {"status":"loading"} before it.
//   - GET /metrics, with PublicMetrics: the Server's Prometheus metrics
//     without the API key, for the inference gateway's endpoint picker and
//     Prometheus, which scrape the pod's address and send no key (as
//     vLLM's /metrics needs none). Without PublicMetrics it is the
//     Server's route like any other.
//
// These are answered by the Front itself, so neither the API key nor the
// Server's other checks apply to them: probes send no credentials. Every
// other request goes to the Server, or is refused with 503 and Retry-After
// while the model loads.
//
// Serve drains in the order Kubernetes expects of a terminating pod:
// readiness goes false at once, requests are still accepted for DrainDelay
// (load balancers take a moment to stop sending), then the listener closes,
// requests in flight get ShutdownTimeout to finish, those still running are
// cancelled, and Serve returns nil.
type Front struct {
	cfg        FrontConfig
	srv        atomic.Pointer[Server]
	draining   atomic.Bool
	base       context.Context
	cancelBase context.CancelCauseFunc
	handler    http.Handler
}

// FrontConfig sets a Front's HTTP limits and its drain.
type FrontConfig struct {
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout are http.Server's (0:
	// the defaults of Config).
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	// DrainDelay is how long requests are still accepted, with readiness
	// false, after Serve's context ends (0: none, for one machine).
	DrainDelay time.Duration
	// ShutdownTimeout is how long requests in flight may take to finish
	// once the listener closes (0: DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// UnreadyWhenFull makes /readyz 503 while every slot is busy and the
	// queue is full.
	UnreadyWhenFull bool
	// PublicMetrics answers GET /metrics without the API key.
	PublicMetrics bool
	// Logger receives lifecycle lines (nil: slog.Default()).
	Logger *slog.Logger
}

// NewFront returns a Front with no Server: /readyz says loading.
func NewFront(cfg FrontConfig) *Front {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&cfg.ReadTimeout, DefaultReadTimeout)
	def(&cfg.IdleTimeout, DefaultIdleTimeout)
	def(&cfg.ShutdownTimeout, DefaultShutdownTimeout)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	f := &Front{cfg: cfg}
	f.base, f.cancelBase = context.WithCancelCause(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", f.live)
	mux.HandleFunc("GET /readyz", f.ready)
	mux.HandleFunc("GET /health", f.health)
	if cfg.PublicMetrics {
		mux.HandleFunc("GET /metrics", f.metrics)
	}
	mux.HandleFunc("/", f.rest)
	f.handler = mux
	return f
}

// Attach hands every request from now on to s: the model is loaded.
func (f *Front) Attach(s *Server) { f.srv.Store(s) }

// probeStatus is the body of /livez and /readyz.
type probeStatus struct {
	Status string `json:"status"` // alive, ready, loading, draining, full
}

func (f *Front) live(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, probeStatus{"alive"})
}

func (f *Front) ready(w http.ResponseWriter, r *http.Request) {
	s := f.srv.Load()
	switch {
	case f.draining.Load():
		writeJSON(w, http.StatusServiceUnavailable, probeStatus{"draining"})
	case s == nil:
		writeJSON(w, http.StatusServiceUnavailable, probeStatus{"loading"})
	case f.cfg.UnreadyWhenFull && s.full():
		writeJSON(w, http.StatusServiceUnavailable, probeStatus{"full"})
	default:
		writeJSON(w, http.StatusOK, probeStatus{"ready"})
	}
}

func (f *Front) health(w http.ResponseWriter, r *http.Request) {
	if s := f.srv.Load(); s != nil {
		s.handleHealth(w, r)
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, probeStatus{"loading"})
}

func (f *Front) metrics(w http.ResponseWriter, r *http.Request) {
	if s := f.srv.Load(); s != nil {
		// Without the key, still not by a foreign name (DNS rebinding).
		s.checkHost(s.metricsHandler()).ServeHTTP(w, r)
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, probeStatus{"loading"})
}

func (f *Front) rest(w http.ResponseWriter, r *http.Request) {
	if s := f.srv.Load(); s != nil {
		s.Handler().ServeHTTP(w, r)
		return
	}
	writeError(w, &apiError{status: http.StatusServiceUnavailable, kind: "server_error", code: "model_loading",
		message: "the model is still loading; retry shortly"})
}

// full reports every slot busy and the queue full: a new request would be
// refused with 429.
func (s *Server) full() bool {
	busy, queued := s.sched.busy()
	return busy == len(s.slots) && queued >= s.cfg.Queue
}

// Handler is the Front's http.Handler.
func (f *Front) Handler() http.Handler { return f.handler }

// Serve answers requests on ln until ctx ends, then drains (see Front) and
// returns nil.
func (f *Front) Serve(ctx context.Context, ln net.Listener) error {
	log := f.cfg.Logger
	hs := &http.Server{
		Handler:           f.handler,
		ReadHeaderTimeout: f.cfg.ReadHeaderTimeout,
		ReadTimeout:       f.cfg.ReadTimeout,
		IdleTimeout:       f.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return f.base },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	f.draining.Store(true)
	if f.cfg.DrainDelay > 0 {
		log.Info("draining: not ready, still accepting requests", "for", f.cfg.DrainDelay)
		select {
		case <-time.After(f.cfg.DrainDelay):
		case err := <-done:
			return err
		}
	}
	log.Info("shutting down: finishing in-flight requests", "grace", f.cfg.ShutdownTimeout)
	grace, cancel := context.WithTimeout(context.Background(), f.cfg.ShutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(grace); err != nil {
		log.Warn("shutting down: cancelling the requests still running")
		f.cancelBase(errShutdown)
		// Cancelled generations end within a step; connections still open
		// after that (a client not reading) are closed.
		wait, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := hs.Shutdown(wait); err != nil {
			hs.Close()
		}
	}
	<-done
	return nil
}

// ModelName is the model's id in /v1/models.
func (s *Server) ModelName() string { return s.cfg.ModelName }

// Template is the built-in chat template the Server renders messages with.
func (s *Server) Template() string { return s.cfg.Template }
