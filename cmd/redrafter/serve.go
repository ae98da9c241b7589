package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/envvar"
	"github.com/seed9b8f47b1/redrafter/internal/server"
)

const serveHelp = `Serve the model over the OpenAI HTTP API: POST /v1/chat/completions (streaming
too), /v1/completions, GET /v1/models, /health, /metrics (Prometheus), and
POST /tokenize, /detokenize. docs/SERVER.md lists the fields and limits.

Up to --parallel requests decode at once, each in a slot that keeps its KV
cache, so a chat's next turn runs only what is new; --queue more wait, and
beyond that requests are refused at once (429). With --drafter, every
generation uses ReDrafter speculative decoding.

It listens on 127.0.0.1:8080 (loopback only) unless told otherwise;
--socket serves on a Unix socket instead (mode 0600). With --api-key (or
REDRAFTER_API_KEY) every route but the probes requires
"Authorization: Bearer KEY"; beyond loopback a key is required unless
--no-api-key says the port is open on purpose. So that web pages cannot
drive it through the browser, POST bodies must be application/json (415
otherwise) and the Host header an IP address, localhost, the --host name or
an --allowed-host name (403 otherwise).

It listens before the model loads: GET /livez answers 200 while the process
serves, GET /readyz 503 until the model is loaded, then 200 (Kubernetes'
liveness and readiness probes; docs/DEPLOY.md). Ctrl-C, SIGTERM or SIGHUP makes
/readyz 503, keeps accepting requests for --drain-delay, then stops
accepting, lets the requests in flight finish (--shutdown-timeout, then
cancels them) and exits 0. The address is logged on stderr once the server
listens (--port 0 picks a free port).`

type serveFlags struct {
	model, drafter, kvCache, template, name  string
	context, beamWidth, beamLength           int
	host, socket                             string
	port, parallel, queue                    int
	apiKey                                   string
	corsOrigins, allowedHosts                []string
	noAPIKey, unreadyWhenFull, publicMetrics bool
	drainDelay, shutdownTimeout              time.Duration
}

func newServeCmd(g *globalFlags) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve --model PATH [--drafter DIR] [--host 127.0.0.1] [--port 8080 | --socket PATH] [--parallel N] [--queue N] [--api-key KEY]",
		Short: "Serve the model over the OpenAI HTTP API (chat completions, completions, streaming)",
		Long:  serveHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServe(cmd, g, &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.model, "model", "m", "", "model: a .gguf file or an HF checkpoint directory (required)")
	fl.StringVar(&f.drafter, "drafter", "", "ReDrafter draft head directory: every generation decodes speculatively")
	fl.IntVar(&f.beamWidth, "beam-width", 0, "ReDrafter beams per step, 1-50 (0: the backend's default; needs --drafter)")
	fl.IntVar(&f.beamLength, "beam-length", 0, "ReDrafter tokens per beam including the last accepted one, >= 2 (0: the backend's default; needs --drafter)")
	fl.IntVar(&f.context, "context", 0, "tokens each slot holds, prompt and reply, at most the model's (0: the model's)")
	fl.StringVar(&f.kvCache, "kv-cache", "", "KV cache element type: f32, or f16 for half the memory; default f16 on a GPU, f32 on the CPU")
	fl.StringVar(&f.template, "template", "auto", "chat template: vicuna, llama2, chatml, llama3, or auto (from the model's metadata; vicuna, with a warning, when it has none we know)")
	fl.StringVar(&f.name, "model-name", "", "the model's id in /v1/models, which requests may name (default: the model file's name without its extension)")
	fl.StringVar(&f.host, "host", "127.0.0.1", "address to listen on (0.0.0.0 or :: for every interface: then set --api-key, and --allowed-host for the names clients use)")
	fl.IntVar(&f.port, "port", 8080, "TCP port (0: a free one, logged)")
	fl.StringVar(&f.socket, "socket", "", "listen on this Unix socket instead of TCP (created with mode 0600; a stale socket there is replaced)")
	fl.IntVar(&f.parallel, "parallel", 1, "requests decoding at once (slots), each with a KV cache of --context tokens")
	fl.IntVar(&f.queue, "queue", 16, "requests that may wait for a slot; more are refused with 429 (0: none wait)")
	fl.StringVar(&f.apiKey, "api-key", envvar.APIKey.Get(), "require \"Authorization: Bearer KEY\" on every route but /health (env "+envvar.APIKey.Name()+", which keeps it out of the process list)")
	fl.BoolVar(&f.noAPIKey, "no-api-key", false, "listen beyond loopback without --api-key, on purpose (behind a gateway that authenticates)")
	fl.DurationVar(&f.drainDelay, "drain-delay", 0, "after SIGTERM, keep accepting requests this long with /readyz 503 before closing the port (a few seconds behind a load balancer)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", server.DefaultShutdownTimeout, "after closing the port, how long requests in flight may take before they are cancelled")
	fl.BoolVar(&f.unreadyWhenFull, "unready-when-full", false, "/readyz answers 503 while every slot is busy and the queue is full")
	fl.BoolVar(&f.publicMetrics, "public-metrics", false, "/metrics answers without the API key (Prometheus and the inference gateway's endpoint picker send none)")
	fl.StringArrayVar(&f.corsOrigins, "cors-origin", nil, "browser origin allowed to call the API, e.g. http://localhost:3000 (repeatable; * for any); none by default")
	fl.StringArrayVar(&f.allowedHosts, "allowed-host", nil, "a name requests may give as Host besides IP addresses, localhost and a --host name, e.g. a reverse proxy's llm.example.com (repeatable; * for any); others get 403")
	_ = cmd.MarkFlagRequired("model")
	return cmd
}

func (f *serveFlags) check(cmd *cobra.Command) error {
	switch {
	case f.parallel < 1 || f.parallel > 256:
		return fmt.Errorf("--parallel %d: want 1 to 256 slots", f.parallel)
	case f.queue < 0:
		return fmt.Errorf("--queue %d: want 0 or more", f.queue)
	case f.port < 0 || f.port > 65535:
		return fmt.Errorf("--port %d: want 0 to 65535", f.port)
	case f.socket != "" && (cmd.Flags().Changed("host") || cmd.Flags().Changed("port")):
		return errors.New("give --socket or --host/--port, not both")
	case f.context < 0:
		return fmt.Errorf("--context %d: want a positive number of tokens, or 0 for the model's context", f.context)
	case f.drainDelay < 0 || f.shutdownTimeout <= 0:
		return fmt.Errorf("--drain-delay %v, --shutdown-timeout %v: want 0 or more, and more than 0", f.drainDelay, f.shutdownTimeout)
	case f.socket == "" && !isLoopback(f.host) && f.apiKey == "" && !f.noAPIKey:
		return fmt.Errorf("--host %s without --api-key: anyone who reaches this address could use the model; "+
			"set --api-key (or %s), or pass --no-api-key to open the port on purpose", f.host, envvar.APIKey.Name())
	}
	if err := server.CheckAllowedHosts(f.allowedHosts); err != nil {
		return fmt.Errorf("--allowed-host: %w", err)
	}
	if f.drafter == "" {
		for _, name := range []string{"beam-width", "beam-length"} {
			if cmd.Flags().Changed(name) {
				fmt.Fprintf(cmd.ErrOrStderr(), "redrafter: warning: --%s has no effect without --drafter\n", name)
			}
		}
	}
	return nil
}

func runServe(cmd *cobra.Command, g *globalFlags, f *serveFlags) error {
	if err := f.check(cmd); err != nil {
		return err
	}
	// Listen first, so that a wrong address fails at once, and so that the
	// probes answer while the model loads (/readyz 503 until it is in).
	ln, err := f.listen()
	if err != nil {
		return err
	}
	if f.socket != "" {
		defer os.Remove(f.socket)
	}
	// Ctrl-C, SIGTERM and SIGHUP shut the server down cleanly (exit 0)
	// rather than cancelling the command, which would exit 128 + the signal.
	if !takeInterrupts(cmd.Context(), stopSignals...) {
		ln.Close()
		return cmd.Context().Err() // a signal before the server took them
	}
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
	defer stop()
	front := server.NewFront(server.FrontConfig{
		DrainDelay: f.drainDelay, ShutdownTimeout: f.shutdownTimeout,
		UnreadyWhenFull: f.unreadyWhenFull, PublicMetrics: f.publicMetrics, Logger: slog.Default(),
	})
	serving := make(chan error, 1)
	go func() { serving <- front.Serve(ctx, ln) }()
	slog.Info("loading the model", "addr", ln.Addr().String(), "model", f.model)

	srv, e, err := f.load(ctx, cmd, g)
	if err != nil {
		stop()
		<-serving
		if errors.Is(err, errStoppedLoading) {
			slog.Info("stopped while the model loaded")
			return nil // a clean stop: nothing was in flight
		}
		return err
	}
	defer e.Close()
	defer srv.Close()
	front.Attach(srv)
	// "listening" means ready: tests and scripts wait for this line.
	attrs := []any{"addr", ln.Addr().String(), "model", srv.ModelName(), "template", srv.Template(), "parallel", f.parallel, "queue", f.queue, "context", e.Context()}
	if _, ok := e.DraftHead(); ok {
		w, l := e.DefaultBeam()
		if f.beamWidth > 0 {
			w = f.beamWidth
		}
		if f.beamLength > 0 {
			l = f.beamLength
		}
		attrs = append(attrs, "redrafter", fmt.Sprintf("W=%d L=%d", w, l))
	}
	if f.apiKey == "" && f.socket == "" && !isLoopback(f.host) {
		slog.Warn("listening beyond loopback without --api-key (--no-api-key): anyone who reaches this address can use the model", "host", f.host)
	}
	slog.Info("listening", attrs...)
	err = <-serving
	if err == nil {
		slog.Info("stopped")
	}
	return err
}

// errStoppedLoading is load's error when a signal came while the model
// loaded.
var errStoppedLoading = errors.New("stopped while the model loaded")

// load loads the model and makes the Server. A signal while the model loads
// returns errStoppedLoading at once: loading cannot be cancelled, and the
// process exits without waiting for it.
func (f *serveFlags) load(ctx context.Context, cmd *cobra.Command, g *globalFlags) (*server.Server, *redrafter.Engine, error) {
	type loaded struct {
		srv *server.Server
		e   *redrafter.Engine
		err error
	}
	done := make(chan loaded, 1)
	go func() {
		m := modelFlags{cmd: cmd, model: f.model, context: f.context, kvCache: f.kvCache, drafter: f.drafter}
		e, err := m.load(g)
		if err != nil {
			done <- loaded{err: err}
			return
		}
		srv, err := f.newServer(e)
		if err != nil {
			e.Close()
		}
		done <- loaded{srv, e, err}
	}()
	select {
	case l := <-done:
		return l.srv, l.e, l.err
	case <-ctx.Done():
		return nil, nil, errStoppedLoading
	}
}

func (f *serveFlags) newServer(e *redrafter.Engine) (*server.Server, error) {
	tmpl, err := chooseTemplate(f.template, e.ChatTemplate)
	if err != nil {
		return nil, err
	}
	if w := templateWarning(f.template, e.ChatTemplate); w != "" {
		slog.Warn(w)
	}
	name := f.name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(filepath.Clean(f.model)), ".gguf")
	}
	draft := redrafter.DraftOptions{BeamWidth: f.beamWidth, BeamLength: f.beamLength}
	if err := e.CheckDraft(draft); err != nil {
		return nil, fmt.Errorf("--beam-width %d --beam-length %d: %w", f.beamWidth, f.beamLength, err)
	}
	allowed := f.allowedHosts
	if f.host != "" && net.ParseIP(f.host) == nil && f.socket == "" {
		allowed = append(allowed, f.host) // listening by name: answer to it
	}
	return server.New(server.Config{
		Engine: e, ModelName: name, Template: tmpl, Draft: draft,
		Parallel: f.parallel, Queue: f.queue, APIKey: f.apiKey, CORSOrigins: f.corsOrigins, AllowedHosts: allowed,
		ShutdownTimeout: f.shutdownTimeout, Logger: slog.Default(),
	})
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// listen opens the TCP port or the Unix socket. A socket file left by an
// earlier run is replaced; any other file at that path is an error.
func (f *serveFlags) listen() (net.Listener, error) {
	if f.socket == "" {
		addr := net.JoinHostPort(f.host, strconv.Itoa(f.port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("--host/--port %s: %w", addr, plainErr(err))
		}
		return ln, nil
	}
	if st, err := os.Lstat(f.socket); err == nil {
		if st.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("--socket %s: a file that is not a socket is there: choose another path", f.socket)
		}
		if c, err := net.Dial("unix", f.socket); err == nil {
			c.Close()
			return nil, fmt.Errorf("--socket %s: another server is listening there", f.socket)
		}
		os.Remove(f.socket)
	}
	ln, err := net.Listen("unix", f.socket)
	if err != nil {
		return nil, fmt.Errorf("--socket %s: %w", f.socket, plainErr(err))
	}
	// Only this user may connect.
	if err := os.Chmod(f.socket, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("--socket %s: %w", f.socket, plainErr(err))
	}
	return ln, nil
}
