package exporter

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	toolkit "github.com/prometheus/exporter-toolkit/web"
	"github.com/rs/zerolog"

	"github.com/persyst/persyst/internal/tick"
)

// DefaultAllow is who may scrape when MetricsAllow is not set: this host only.
var DefaultAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// ServeOptions configure Serve.
type ServeOptions struct {
	// Addr is host:port to listen on (the host is explicit: 0.0.0.0 for every address).
	Addr string
	// Allow are the networks clients may scrape from (nil: DefaultAllow).
	Allow    []netip.Prefix
	Registry *prometheus.Registry
	Log      zerolog.Logger
	// Now is the clock of the refusal log's rate limit (nil: time.Now).
	Now func() time.Time
	// WebConfig is a web configuration file in the format every Prometheus exporter takes
	// (github.com/prometheus/exporter-toolkit: TLS, client certificates, basic auth with
	// bcrypt hashes); "": plain HTTP, no authentication. It is read again at every
	// connection and request, so that a changed file applies at once.
	WebConfig string
}

// Serve binds opts.Addr and serves /metrics from opts.Registry until ctx is done. It
// returns once the address is bound (or could not be), with the bound address.
func Serve(ctx context.Context, opts ServeOptions) (net.Addr, error) {
	if opts.Registry == nil {
		return nil, errors.New("exporter: no registry")
	}
	if err := CheckWebConfig(opts.WebConfig); err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen %s: %w", opts.Addr, err)
	}
	srv := &http.Server{
		Handler:           Handler(opts),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    8 << 10,
		ErrorLog:          ErrorLog(opts.Log, opts.Now, "metrics"),
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		// The toolkit serves plain HTTP without a web configuration file.
		flags := &toolkit.FlagConfig{WebConfigFile: &opts.WebConfig}
		if err := toolkit.Serve(ln, srv, flags, slog.New(zerolog.NewSlogHandler(opts.Log.Level(zerolog.WarnLevel)))); err != nil && !errors.Is(err, http.ErrServerClosed) {
			opts.Log.Error().Err(err).Str("listen", opts.Addr).Msg("metrics service stopped")
		}
	}()
	opts.Log.Info().Str("listen", ln.Addr().String()).Bool("web_config", opts.WebConfig != "").Msg("serving Prometheus metrics on /metrics")
	if opts.WebConfig == "" {
		opts.Log.Warn().Str("listen", ln.Addr().String()).Msg("metrics served without authentication: every process that reaches the address and MetricsAllow may scrape them (set MetricsWebConfig: docs/prometheus.md)")
	}
	return ln.Addr(), nil
}

// CheckWebConfig says what is wrong with a web configuration file (ServeOptions.WebConfig;
// "": none, nothing), naming the file.
func CheckWebConfig(path string) error {
	if path == "" {
		return nil
	}
	if err := toolkit.Validate(path); err != nil {
		return fmt.Errorf("metrics web configuration %s: %w", path, err)
	}
	return nil
}

// Keep serves like Serve, but an address that cannot be bound does not stop the agent: the
// error is logged and the bind retried every retry (default 10 s) until it succeeds or ctx
// is done. It returns nil when the first bind succeeded, else the first error (the agent
// goes on without metrics for now). A bad web configuration file is not retried: the
// metrics are not served until the agent is started again with a good one.
func Keep(ctx context.Context, opts ServeOptions, retry time.Duration) error {
	if retry <= 0 {
		retry = 10 * time.Second
	}
	if err := CheckWebConfig(opts.WebConfig); err != nil {
		// Never served without the authentication the site configured; the agent goes on.
		opts.Log.Error().Err(err).Msg("metrics not served")
		return err
	}
	_, err := Serve(ctx, opts)
	if err == nil {
		return nil
	}
	opts.Log.Error().Err(err).Dur("retry", retry).Msg("metrics not served yet: the address is retried")
	go tick.Until(ctx, retry, func() bool {
		_, err := Serve(ctx, opts)
		return err == nil
	})
	return err
}

// Handler answers /metrics for the allowed clients, 403 for the others and 404 for any
// other path.
func Handler(opts ServeOptions) http.Handler {
	allow := opts.Allow
	if allow == nil {
		allow = DefaultAllow
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	metrics := promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{
		MaxRequestsInFlight: 4,
		Timeout:             20 * time.Second,
		ErrorHandling:       promhttp.ContinueOnError,
	})
	lim := &refusals{log: opts.Log, now: now}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed(allow, r.RemoteAddr) {
			lim.note(r.RemoteAddr)
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		metrics.ServeHTTP(w, r)
	})
}

// allowed reports whether a client's address lies in one of the networks.
func allowed(allow []netip.Prefix, remote string) bool {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return false
	}
	a := ap.Addr().Unmap()
	for _, p := range allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// refusals logs refused clients at most once a minute, with how many were refused since
// the last line: a client cannot grow the log.
type refusals struct {
	log  zerolog.Logger
	now  func() time.Time
	mu   sync.Mutex
	last time.Time
	n    int
}

func (l *refusals) note(remote string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	t := l.now()
	if !l.last.IsZero() && t.Sub(l.last) < time.Minute {
		return
	}
	host, _, _ := net.SplitHostPort(remote)
	if len(host) > 64 {
		host = host[:64]
	}
	l.log.Warn().Str("client", host).Int("refused", l.n).Msg("metrics: scrape refused: client not in MetricsAllow")
	l.last, l.n = t, 0
}

// ErrorLog is an http.Server's error log that a client cannot grow: what the server says
// of failed connections (a TLS handshake without a client certificate, a malformed
// request) is logged at most once a minute, with how many there were since the last
// line.
func ErrorLog(log zerolog.Logger, now func() time.Time, what string) *stdlog.Logger {
	if now == nil {
		now = time.Now
	}
	return stdlog.New(&errorLines{log: log, now: now, what: what}, "", 0)
}

// errorLines counts an http.Server's error lines and logs one a minute.
type errorLines struct {
	log  zerolog.Logger
	now  func() time.Time
	what string
	mu   sync.Mutex
	last time.Time
	n    int
}

func (e *errorLines) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	t := e.now()
	if !e.last.IsZero() && t.Sub(e.last) < time.Minute {
		return len(p), nil
	}
	msg := strings.TrimSpace(string(p))
	if len(msg) > 200 {
		msg = msg[:200]
	}
	e.log.Warn().Str("last", msg).Int("connections", e.n).Msg(e.what + ": connections failed")
	e.last, e.n = t, 0
	return len(p), nil
}
