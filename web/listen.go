package web

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	toolkit "github.com/prometheus/exporter-toolkit/web"
	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/exporter"
	"github.com/persyst/persyst/internal/unixsock"
)

// Where the view serves, and how it knows who connects. On a unix socket (the default)
// the kernel names the connecting process (SO_PEERCRED): only the site's reverse proxy
// (Options.ProxyUIDs) and root are served, whatever the socket's mode, and with --all
// root alone. On a TCP address every local user can connect from loopback, so the
// proxy must prove itself there: a web configuration file (the exporter toolkit's, as
// for /metrics) that requires its client certificate or its basic-auth password.

// ListenOptions say where the view listens.
type ListenOptions struct {
	// Addr is "unix:PATH" (the socket is made here), "systemd" (the socket systemd passes:
	// persyst-web.socket) or "HOST:PORT".
	Addr string
	// Group is the group a socket made here is given (mode 0660): the proxy's.
	Group string
	// WebConfig is the web configuration file of a TCP address (TLS, client
	// certificates, basic auth).
	WebConfig string
}

// Listener is where the view serves.
type Listener struct {
	net.Listener
	// Unix is set for a unix socket: connections are told apart by their peer's uid.
	Unix      bool
	webConfig string
}

// Check says what is wrong with serving o on where ("" : nothing): every job to whoever
// connects only on a unix socket (root alone is served there), and a user named by a
// proxy on TCP only where the proxy proves itself.
func Check(o Options, where ListenOptions) error {
	unixSocket := where.Addr == "systemd" || strings.HasPrefix(where.Addr, "unix:")
	switch {
	case unixSocket:
		return nil
	case o.All:
		return errors.New("--all shows every job to whoever connects: only on a unix socket (--listen unix:PATH, or systemd's persyst-web.socket), where root alone is served")
	case o.UserHeader != "" && where.WebConfig == "":
		return fmt.Errorf("--listen %s with --user-header trusts whoever connects, and every local user can connect to a TCP address and name themselves root: "+
			"serve on the unix socket (the default, --listen unix:/run/persyst-web/web.sock, which only the proxy's user may use), "+
			"or make the proxy prove itself with --web-config-file (client certificates or basic auth)", where.Addr)
	case o.UserHeader != "":
		return proxyProves(where.WebConfig)
	}
	return nil
}

// proxyProves says what is wrong with a web configuration file for a TCP address: it
// must be valid and make every client prove itself, with a certificate of the client CA
// or a basic-auth password.
func proxyProves(path string) error {
	if err := exporter.CheckWebConfig(path); err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var c struct {
		TLS struct {
			ClientAuth string `yaml:"client_auth_type"`
		} `yaml:"tls_server_config"`
		Users map[string]string `yaml:"basic_auth_users"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("web configuration %s: %w", path, err)
	}
	if c.TLS.ClientAuth != "RequireAndVerifyClientCert" && len(c.Users) == 0 {
		return fmt.Errorf("web configuration %s: the proxy does not prove itself: set tls_server_config's client_auth_type: RequireAndVerifyClientCert (and client_ca_file), or basic_auth_users", path)
	}
	return nil
}

// Listen binds where the view serves.
func Listen(ctx context.Context, o ListenOptions) (*Listener, error) {
	switch {
	case o.Addr == "systemd":
		lns, err := activation.Listeners()
		if err != nil || len(lns) == 0 || lns[0] == nil {
			return nil, fmt.Errorf("web: --listen systemd: no socket from systemd (start persyst-web.socket): %v", err)
		}
		for _, l := range lns[1:] {
			if l != nil {
				l.Close()
			}
		}
		_, isUnix := lns[0].(*net.UnixListener)
		return &Listener{Listener: lns[0], Unix: isUnix}, nil
	case strings.HasPrefix(o.Addr, "unix:"):
		ln, err := listenUnix(strings.TrimPrefix(o.Addr, "unix:"), o.Group)
		if err != nil {
			return nil, err
		}
		return &Listener{Listener: ln, Unix: true}, nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("web: listen %s: %w", o.Addr, err)
	}
	return &Listener{Listener: ln, webConfig: o.WebConfig}, nil
}

// listenUnix makes the socket at path (its directory 0755 if missing; a stale socket of
// a view that stopped is replaced, a live one is an error), mode 0660, of group.
func listenUnix(path, group string) (net.Listener, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("web: unix:%s: want an absolute path", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("web: %w", err)
	}
	ln, err := unixsock.Listen(path, 0o660, "view")
	if err != nil {
		return nil, fmt.Errorf("web: %w", err)
	}
	if group != "" {
		gid, err := config.LookupGID(group)
		if err == nil {
			err = os.Lchown(path, -1, int(gid))
		}
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("web: give the socket %s to the proxy's group %s: %w (run persyst web as root, in that group, or with systemd's persyst-web.socket)", path, group, err)
		}
	}
	return ln, nil
}

// Serve serves h on l until ctx is done; a TCP listener takes its web configuration file
// (TLS, client certificates, basic auth).
func Serve(ctx context.Context, l *Listener, h http.Handler, log zerolog.Logger) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10,
		ErrorLog: exporter.ErrorLog(log, nil, "web"), ConnContext: withPeer}
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	go func() {
		var err error
		if l.Unix {
			err = srv.Serve(l)
		} else {
			flags := &toolkit.FlagConfig{WebConfigFile: &l.webConfig}
			err = toolkit.Serve(l, srv, flags, slog.New(zerolog.NewSlogHandler(log.Level(zerolog.WarnLevel))))
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("web view stopped")
		}
	}()
}

// peer is who connected: on a unix socket, the process's uid as the kernel says it.
type peer struct {
	unix bool
	uid  uint32
}

type peerKey struct{}

// withPeer puts the connection's peer into its requests' context.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	p := peer{unix: true, uid: ^uint32(0)} // nobody, until the kernel says
	if raw, err := uc.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) {
			if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
				p.uid = cred.Uid
			}
		})
	}
	return context.WithValue(ctx, peerKey{}, p)
}

func peerOf(r *http.Request) (peer, bool) {
	p, ok := r.Context().Value(peerKey{}).(peer)
	return p, ok
}

// mayProxy says whether a unix socket's peer is the proxy (or root).
func (s *server) mayProxy(p peer) bool {
	return p.uid == 0 || slices.Contains(s.o.ProxyUIDs, p.uid)
}
