// Package unixsock binds a service's unix socket the way every persyst service does: a
// stale socket left by a process that died is replaced, a live one (something answers
// there) is an error, and the socket gets its mode before the listener is returned.
package unixsock

import (
	"fmt"
	"net"
	"os"
	"time"
)

// Listen binds the unix socket at path with mode. who names what else might be
// answering there, for the error ("another daemon is answering there"). The socket is
// removed when the listener is closed. Until the chmod, the socket has the process
// umask's mode: connecting needs write permission, so at worst fewer may connect.
func Listen(path string, mode os.FileMode, who string) (*net.UnixListener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("listen %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen %s: another %s is answering there", path, who)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return ln, nil
}
