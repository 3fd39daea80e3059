package target

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMySQL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want MySQL
		err  string
	}{
		{in: "mysql://persyst@db.example/persyst", want: MySQL{User: "persyst", Net: "tcp", Addr: "db.example:3306", Database: "persyst"}},
		{
			in:   "mysql://persyst@db.example:3307/site?password-file=/etc/persyst/db.pass&tls=true",
			want: MySQL{User: "persyst", Net: "tcp", Addr: "db.example:3307", Database: "site", PasswordFile: "/etc/persyst/db.pass", TLS: "true"},
		},
		{
			in:   "mysql://root@localhost/persyst?socket=/run/mysqld/mysqld.sock",
			want: MySQL{User: "root", Net: "unix", Addr: "/run/mysqld/mysqld.sock", Database: "persyst"},
		},
		{
			in:   "mysql://p@[::1]/x?tls-ca=/etc/ssl/ca.pem",
			want: MySQL{User: "p", Net: "tcp", Addr: "[::1]:3306", Database: "x", TLS: "true", TLSCA: "/etc/ssl/ca.pem"},
		},
		{in: "mysql://persyst:s3cret@db/persyst", err: "password-file"},
		{in: "mysql://db/persyst", err: "without a user"},
		{in: "mysql://p@db/", err: "database name"},
		{in: "mysql://p@db/a/b", err: "database name"},
		{in: "mysql://p@db/x?tls=maybe", err: "tls="},
		{in: "mysql://p@db/x?timeout=1s", err: "unknown parameter"},
		{in: "mysql://p@/x", err: "without a host"},
		{in: "mysql://p:%zz@db/x", err: "not a URL"},
	} {
		got, err := ParseMySQL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one with %q", tc.in, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Errorf("%s: the error repeats the password: %v", tc.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.in, diff)
		}
		if s := got.String(); strings.Contains(s, "password") {
			t.Errorf("%s: String() = %q", tc.in, s)
		}
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{"/var/lib/persyst-frontend/frontend.db", ""},
		{"mysql://persyst@db/persyst?password-file=/etc/persyst/db.pass", ""},
		{"frontend.db", "absolute path"},
		{"/var/lib/x.db?mode=ro", "absolute path"},
		{"mysql://persyst:s3cret@db/persyst", "password-file"},
		{"mysql://db/persyst", "without a user"},
	} {
		err := Check(tc.in)
		if (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Check(%q) = %v, want an error with %q", tc.in, err, tc.err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Check(%q) repeats the password: %v", tc.in, err)
		}
	}
	for in, want := range map[string]string{
		"/a/b.db": "/a/b.db",
		"mysql://persyst@db/site?password-file=/etc/p": "mysql://persyst@db:3306/site",
		"mysql://persyst:s3cret@db/site":               "mysql://(not a valid target)",
	} {
		if got := Describe(in); got != want {
			t.Errorf("Describe(%q) = %q, want %q", in, got, want)
		}
	}
}
