package integration

// Every service persyst's units start as Type=notify tells systemd it is ready only once
// it accepts connections, feeds the watchdog the unit asks for, and says it is stopping
// on SIGTERM. systemd is not PID 1 here: the test plays its part (NOTIFY_SOCKET,
// WATCHDOG_USEC) with a unixgram socket of its own, the protocol systemd speaks.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/persyst/persyst/internal/testenv"
)

func TestServicesNotifySystemd(t *testing.T) {
	defer sideBySide(t)()
	persyst := persystBin()
	if _, err := os.Stat(persyst); err != nil {
		t.Fatalf("%s not built (make build)", persyst)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "persyst.conf")
	freePort := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	// No munged here: the agents may run without authentication only when told so. Each
	// serves its Prometheus metrics too: READY also means they answer.
	metrics := map[string]string{"daemon": freePort(), "collector": freePort(), "sync": freePort(), "frontend": freePort()}
	text := "TreeAuth=none\nNodePort=0\n"
	for role, addr := range metrics {
		text += strings.ToUpper(role[:1]) + role[1:] + "MetricsAddr=" + addr + "\n"
	}
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		role string
		args func(addr string) []string
		dial func(addr string) error
	}{
		{"collector", func(addr string) []string {
			return []string{"collector", "--listen", addr, "--db", filepath.Join(dir, "c.db"), "--config", conf}
		}, func(addr string) error { return dial("tcp", addr) }},
		{"sync", func(addr string) []string {
			return []string{"sync", "--listen", addr, "--db", filepath.Join(dir, "s.db"), "--config", conf}
		}, func(addr string) error { return dial("tcp", addr) }},
		{"frontend", func(addr string) []string {
			return []string{"frontend", "--listen", addr, "--collectors", "c1=" + freePort(), "--nodes", "notify1", "--cycle", "1s", "--config", conf}
		}, func(addr string) error { return dial("tcp", addr) }},
		{"daemon", func(addr string) []string {
			return []string{"daemon", "--socket", addr, "--state-dir", filepath.Join(dir, "state"), "--node", "notify1", "--config", conf}
		}, func(addr string) error { return dial("unix", addr) }},
	} {
		t.Run(tc.role, func(t *testing.T) {
			if tc.role == "daemon" {
				testenv.Root(t, "persyst run creates cgroups")
			}
			addr := freePort()
			if tc.role == "daemon" {
				addr = filepath.Join(dir, "persyst.sock")
			}
			notify := filepath.Join(dir, tc.role+".notify")
			ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			cmd := exec.Command(persyst, tc.args(addr)...)
			cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notify, "WATCHDOG_USEC=1000000")
			var logs strings.Builder
			cmd.Stderr = &logs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			read := func(want string, within time.Duration) {
				t.Helper()
				buf := make([]byte, 512)
				deadline := time.Now().Add(within)
				for {
					ln.SetReadDeadline(deadline)
					n, err := ln.Read(buf)
					if err != nil {
						t.Fatalf("no %s from persyst %s within %v: %v\n%s", want, tc.role, within, err, logs.String())
					}
					msg := string(buf[:n])
					if strings.Contains(msg, want) {
						if want == "READY=1" {
							// Ready means it accepts connections now.
							if err := tc.dial(addr); err != nil {
								t.Errorf("READY=1 before %s accepts connections: %v", addr, err)
							}
							if err := scrapeRole(metrics[tc.role], tc.role); err != nil {
								t.Errorf("READY=1 before the metrics answer: %v", err)
							}
						}
						return
					}
				}
			}
			read("READY=1", 20*time.Second)
			read("WATCHDOG=1", 3*time.Second)
			read("WATCHDOG=1", 3*time.Second)
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			read("STOPPING=1", 10*time.Second)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Errorf("persyst %s did not exit within 15 s of SIGTERM", tc.role)
			}
			t.Logf("persyst %s (pid %s): ready, watchdog fed, stopping", tc.role, strconv.Itoa(cmd.Process.Pid))
		})
	}
}

// scrapeRole scrapes an agent's /metrics and checks it says which agent it is.
func scrapeRole(addr, role string) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `persyst_build_info{role="`+role+`"`) {
		return fmt.Errorf("%s/metrics: %s, no build info of the %s:\n%.300s", addr, resp.Status, role, b)
	}
	return nil
}

// dial connects to addr and hangs up: whether it accepts connections.
func dial(network, addr string) error {
	c, err := net.DialTimeout(network, addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

// TestWebSocketActivation: persyst web as the package deploys it (persyst-web.socket,
// then persyst-web.service with --listen systemd): systemd makes the socket (here the
// test, with the unit's mode and group) and passes it as fd 3 (LISTEN_FDS, LISTEN_PID);
// the view says READY once it serves there, and serves the proxy's user alone.
func TestWebSocketActivation(t *testing.T) {
	defer sideBySide(t)()
	testenv.Root(t, "plays systemd: makes the socket for group www-data, runs clients as other users")
	dir, err := os.MkdirTemp("/tmp", "persyst-websock-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "web.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chmod(sock, 0o660); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(sock, 0, 33); err != nil { // SocketGroup=www-data
		t.Fatal(err)
	}
	f, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	notify := filepath.Join(dir, "web.notify")
	nl, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	// LISTEN_PID is the service's own pid, which systemd sets after the fork.
	cmd := exec.Command("sh", "-c", `LISTEN_PID=$$ exec "$0" "$@"`, persystBin(), "web", "--db", filepath.Join(dir, "front.db"),
		"--listen", "systemd", "--user-header", "X-Remote-User", "--proxy-user", "www-data", "--config", "/dev/null")
	cmd.Env = append(os.Environ(), "LISTEN_FDS=1", "NOTIFY_SOCKET="+notify, "WATCHDOG_USEC=1000000")
	cmd.ExtraFiles = []*os.File{f}
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	buf := make([]byte, 512)
	nl.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		n, err := nl.Read(buf)
		if err != nil {
			t.Fatalf("no READY=1 from persyst web: %v\n%s", err, logs.String())
		}
		if strings.Contains(string(buf[:n]), "READY=1") {
			break
		}
	}
	for _, tc := range []struct {
		who  string
		args []string
		want string
	}{
		{"www-data, the proxy", []string{"--reuid=33", "--regid=33", "--clear-groups"}, "200"},
		{"a user in group www-data", []string{"--reuid=4242", "--regid=33", "--clear-groups"}, "403"},
		{"nobody", []string{"--reuid=65534", "--regid=65534", "--clear-groups"}, "000"},
	} {
		if got := curlSocket(t, sock, tc.args, "someone"); got != tc.want {
			t.Errorf("%s, naming a user, on systemd's socket: HTTP %s, want %s\n%s", tc.who, got, tc.want, logs.String())
		}
	}
}
