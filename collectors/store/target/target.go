// Package target reads where the site's store is: a SQLite file or a MariaDB (or
// MySQL) database named by a mysql:// URL. It is a leaf: persyst.conf's SiteStore is
// checked with it where the store itself is not imported.
package target

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
)

// IsMySQL says whether a store's target names a MariaDB (or MySQL) database
// (mysql://...) rather than a SQLite file.
func IsMySQL(target string) bool { return strings.HasPrefix(target, "mysql://") }

// MySQL is a parsed mysql:// target:
//
//	mysql://USER@HOST[:PORT]/DATABASE[?password-file=PATH&tls=true|skip-verify|false&tls-ca=PATH]
//	mysql://USER@localhost/DATABASE?socket=PATH[&password-file=PATH]
//
// The password is read from password-file, which must be a regular file only its owner
// (root, or the user running persyst) can read: never in the URL, which shows in process
// lists, logs and `persyst check`. Without password-file, no password is sent (MariaDB's
// unix_socket authentication over a socket).
type MySQL struct {
	User, Net, Addr, Database string
	PasswordFile              string
	TLS                       string // "" (none), "true", "skip-verify", "preferred"
	TLSCA                     string // a CA file for the server's certificate
}

// String is the target without anything secret (there is nothing secret in it).
func (t MySQL) String() string {
	if t.Net == "unix" {
		return fmt.Sprintf("mysql://%s@localhost/%s (socket %s)", t.User, t.Database, t.Addr)
	}
	return fmt.Sprintf("mysql://%s@%s/%s", t.User, t.Addr, t.Database)
}

// ParseMySQL parses a mysql:// target; its errors never repeat a password.
func ParseMySQL(target string) (MySQL, error) {
	var t MySQL
	u, err := url.Parse(target)
	if err != nil {
		return t, errors.New("the mysql:// target is not a URL (its text is not repeated here: it may hold a password)")
	}
	if u.Scheme != "mysql" {
		return t, fmt.Errorf("target scheme %q, want mysql", u.Scheme)
	}
	if _, has := u.User.Password(); has {
		return t, errors.New("a password in the mysql:// URL: put it in a file only root can read and name it with password-file= (a URL shows in process lists and logs)")
	}
	t.User = u.User.Username()
	if t.User == "" {
		return t, errors.New("mysql:// target without a user (mysql://USER@HOST/DATABASE)")
	}
	t.Database = strings.TrimPrefix(u.Path, "/")
	if t.Database == "" || strings.ContainsAny(t.Database, "/`\"'\\ ") {
		return t, fmt.Errorf("mysql:// target: database name %q: want one plain name", t.Database)
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "socket", "password-file", "tls", "tls-ca":
		default:
			return t, fmt.Errorf("mysql:// target: unknown parameter %q (want socket, password-file, tls, tls-ca)", k)
		}
	}
	t.PasswordFile, t.TLSCA = q.Get("password-file"), q.Get("tls-ca")
	switch t.TLS = q.Get("tls"); t.TLS {
	case "", "false":
		t.TLS = ""
	case "true", "skip-verify", "preferred":
	default:
		return t, fmt.Errorf("mysql:// target: tls=%q, want true, skip-verify, preferred or false", t.TLS)
	}
	if t.TLSCA != "" && t.TLS == "" {
		t.TLS = "true"
	}
	if s := q.Get("socket"); s != "" {
		t.Net, t.Addr = "unix", s
		return t, nil
	}
	if u.Host == "" {
		return t, errors.New("mysql:// target without a host (or ?socket=PATH)")
	}
	t.Net, t.Addr = "tcp", u.Host
	if u.Port() == "" {
		t.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	return t, nil
}

// Check says whether s names a store: an absolute file path (SQLite), or a mysql://
// target ParseMySQL takes. Its errors never repeat a password.
func Check(s string) error {
	if IsMySQL(s) {
		_, err := ParseMySQL(s)
		return err
	}
	if !filepath.IsAbs(s) || strings.ContainsAny(s, "?#") {
		return errors.New("want an absolute path of a SQLite file, or mysql://USER@HOST/DATABASE?password-file=PATH")
	}
	return nil
}

// Describe is s as logs and `persyst check` show it: a file's path, or the mysql://
// target without anything secret (there is nothing secret in a target ParseMySQL takes;
// one it does not take is not repeated).
func Describe(s string) string {
	if !IsMySQL(s) {
		return s
	}
	t, err := ParseMySQL(s)
	if err != nil {
		return "mysql://(not a valid target)"
	}
	return t.String()
}
