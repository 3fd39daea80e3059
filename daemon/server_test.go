package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/internal/testenv"
)

// The test binary doubles as a client process: with clientEnv set it sends a job_start
// event for job clientJobEnv to the socket named by clientEnv (clientRepeatEnv times),
// prints the outcome as JSON and exits. The server tests run it under another uid.
const (
	clientEnv    = "PERSYST_TEST_CLIENT_SOCKET"
	clientJobEnv = "PERSYST_TEST_CLIENT_JOB"
	// clientRepeatEnv makes the client send its event that many times.
	clientRepeatEnv = "PERSYST_TEST_CLIENT_REPEAT"
	// clientModeEnv: "read" lists the jobs it sees and asks for job clientJobEnv's
	// samples and report; "flood" sends List requests from 4 connections at once for
	// clientRepeatEnv milliseconds. Both print a readResult.
	clientModeEnv = "PERSYST_TEST_CLIENT_MODE"
)

// readResult is what a "read" or "flood" client saw.
type readResult struct {
	Jobs    []uint32 `json:"jobs"`
	Samples string   `json:"samples"` // the error
	Report  string   `json:"report"`  // the error
	Calls   int      `json:"calls"`   // flood: requests made
	Busy    int      `json:"busy"`    // flood: refused as too many
}

type clientResult struct {
	UID   int    `json:"uid"`
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

func TestMain(m *testing.M) {
	if sock := os.Getenv(clientEnv); sock != "" {
		os.Exit(runClient(sock))
	}
	os.Exit(m.Run())
}

func runClient(sock string) int {
	job, err := strconv.ParseUint(os.Getenv(clientJobEnv), 10, 32)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad", clientJobEnv, err)
		return 2
	}
	switch os.Getenv(clientModeEnv) {
	case "read":
		return runReader(sock, uint32(job))
	case "flood":
		ms, _ := strconv.Atoi(os.Getenv(clientRepeatEnv))
		return runFlood(sock, time.Duration(ms)*time.Millisecond)
	}
	n := 1
	if s := os.Getenv(clientRepeatEnv); s != "" {
		if n, err = strconv.Atoi(s); err != nil {
			fmt.Fprintln(os.Stderr, "bad", clientRepeatEnv, err)
			return 2
		}
	}
	// With several calls, the first outcome that differs from the first call's is
	// reported, so one odd outcome among many is not hidden.
	var res clientResult
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		e := &wire.Event{JobID: uint32(job), UID: uint32(os.Getuid()), Persyst: wire.On, Time: time.Now()}
		_, err = wire.Call(ctx, sock, &wire.Request{Kind: wire.JobStart, Event: e})
		cancel()
		r := clientResult{UID: os.Getuid(), OK: err == nil}
		if err != nil {
			r.Error = err.Error()
		}
		if i == 0 {
			res = r
		} else if r != res {
			res = r
			break
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 2
	}
	return 0
}

// runReader is the "read" client.
func runReader(sock string, job uint32) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var res readResult
	_, jobs, err := ListJobs(ctx, sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "list:", err)
		return 2
	}
	res.Jobs = []uint32{}
	for _, j := range jobs {
		res.Jobs = append(res.Jobs, j.JobID)
	}
	if _, err := JobSamples(ctx, sock, job); err != nil {
		res.Samples = err.Error()
	}
	if _, err := JobReport(ctx, sock, job); err != nil {
		res.Report = err.Error()
	}
	return printJSON(res)
}

// runFlood is the "flood" client: List requests from 4 connections at once.
func runFlood(sock string, d time.Duration) int {
	var mu sync.Mutex
	var res readResult
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := wire.Call(ctx, sock, &wire.Request{Kind: wire.List})
				cancel()
				mu.Lock()
				res.Calls++
				if err != nil && strings.Contains(err.Error(), "busy:") {
					res.Busy++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return printJSON(res)
}

func printJSON(v any) int {
	if err := json.NewEncoder(os.Stdout).Encode(v); err != nil {
		return 2
	}
	return 0
}

// testServer is a running Server on a socket in a world-traversable temp dir.
type testServer struct {
	sock string
	reg  *Registry
	srv  *Server
}

// socketDir returns a new temp dir that uid 65534 can traverse (t.TempDir is 0700).
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "persyst-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// self is the uid of this test process: the server tests talk to their daemon from it,
// so when they run as non-root it must be allowed like the Slurm user would be.
func self() uint32 { return uint32(os.Geteuid()) }

func startServer(t *testing.T, cfg ServerConfig, clock Clock) *testServer {
	t.Helper()
	reg := newReg(t, RegistryConfig{Node: "node1", Dir: t.TempDir()})
	sock := filepath.Join(socketDir(t), "persyst.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	cfg.AllowedUIDs = append(cfg.AllowedUIDs, self())
	srv := NewServer(cfg, reg, nil, zerolog.Nop(), clock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("Serve did not return after cancel")
		}
	})
	return &testServer{sock: sock, reg: reg, srv: srv}
}

func call(t *testing.T, sock string, req *wire.Request) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := wire.Call(ctx, sock, req)
	return err
}

func listJobs(t *testing.T, sock string) []*Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	node, jobs, err := ListJobs(ctx, sock)
	if err != nil {
		t.Fatalf("ListJobs: %v", err)
	}
	if node != "node1" {
		t.Errorf("ListJobs node = %q, want node1", node)
	}
	out := make([]*Job, len(jobs))
	for i, j := range jobs {
		out[i] = j.Job
	}
	return out
}

// rawExchange sends line (plus a newline) on a fresh connection and returns the reply.
func rawExchange(t *testing.T, sock string, line []byte) wire.Reply {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	// Write concurrently: the server may stop reading (and answer) before the end.
	go func() { _, _ = c.Write(append(line, '\n')) }()
	b, err := wire.ReadLine(bufio.NewReader(c))
	if err != nil {
		t.Fatalf("reading reply: %v", err)
	}
	var rep wire.Reply
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("reply %q: %v", b, err)
	}
	return rep
}

var ignoreUpdated = cmpopts.IgnoreFields(Job{}, "Updated", "Recorded")

func jobStart(job uint32, mod ...func(e *wire.Event)) *wire.Request {
	e := ev(job, "", at(0), mod...)
	return &wire.Request{Kind: wire.JobStart, Event: &e}
}

func TestServerEvents(t *testing.T) {
	// Event times near the server's clock (time.Now), so that ended jobs are within the
	// registry's retention.
	base := time.Now().UTC().Truncate(time.Second)
	at := func(d time.Duration) time.Time { return base.Add(d) }
	jobStart := func(job uint32, mod ...func(e *wire.Event)) *wire.Request {
		e := ev(job, "", at(0), mod...)
		return &wire.Request{Kind: wire.JobStart, Event: &e}
	}
	stepStart := func(job uint32, step string) *wire.Request {
		e := ev(job, step, at(time.Second), func(e *wire.Event) { e.StepCores = "0-1" })
		return &wire.Request{Kind: wire.StepStart, Event: &e}
	}
	stepEnd := func(job uint32, step string, status int) *wire.Request {
		e := ev(job, step, at(2*time.Second), func(e *wire.Event) { e.ExitStatus = intp(status) })
		return &wire.Request{Kind: wire.StepEnd, Event: &e}
	}
	jobEnd := func(job uint32) *wire.Request {
		e := ev(job, "", at(3*time.Second))
		return &wire.Request{Kind: wire.JobEnd, Event: &e}
	}
	type sent struct {
		req     *wire.Request
		wantErr string // "" for an OK reply
	}
	tests := []struct {
		name string
		reqs []sent
		want []*Job
	}{
		{
			name: "lifecycle",
			reqs: []sent{
				{jobStart(42, func(e *wire.Event) { e.User = "alice" }), ""},
				{stepStart(42, "batch"), ""},
				{stepEnd(42, "batch", 768), ""},
				{jobEnd(42), ""},
			},
			want: []*Job{{
				JobID: 42, UID: 1000, GID: 1000, User: "alice", Node: "node1", State: Ended, Persyst: wire.On,
				Started: at(0), Ended: tp(at(3 * time.Second)), JobStartSeen: true, JobEndSeen: true,
				Steps: []*Step{{ID: "batch", State: Ended, Started: at(time.Second), Ended: tp(at(2 * time.Second)),
					Cores: "0-1", ExitStatus: intp(768), Exit: "3:0"}},
			}},
		},
		{
			name: "invalid events refused, valid ones recorded",
			reqs: []sent{
				{jobStart(0), "field job_id"},
				{jobStart(1, func(e *wire.Event) { e.Persyst = "maybe" }), "field persyst"},
				{&wire.Request{Kind: wire.StepStart, Event: &wire.Event{JobID: 2, StepID: "x;y", Persyst: wire.On, Time: at(0)}}, "field step_id"},
				{&wire.Request{Kind: wire.StepEnd, Event: &wire.Event{JobID: 2, StepID: "0", Persyst: wire.On}}, "field time"},
				{&wire.Request{Kind: wire.JobStart}, "field event"},
				{&wire.Request{Kind: "job_suspend", Event: &wire.Event{JobID: 3}}, "field kind"},
				{jobStart(4, func(e *wire.Event) { e.Node = "othernode" }), ""},
			},
			want: []*Job{{
				JobID: 4, UID: 1000, GID: 1000, Node: "node1", State: Running, Persyst: wire.On,
				Started: at(0), JobStartSeen: true, Steps: []*Step{},
			}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, ServerConfig{}, time.Now)
			for i, r := range tc.reqs {
				err := call(t, s.sock, r.req)
				switch {
				case r.wantErr == "" && err != nil:
					t.Errorf("request %d (%s): %v", i, r.req.Kind, err)
				case r.wantErr != "" && (err == nil || !strings.Contains(err.Error(), r.wantErr)):
					t.Errorf("request %d (%s) error = %v, want one containing %q", i, r.req.Kind, err, r.wantErr)
				}
			}
			got := listJobs(t, s.sock)
			if diff := cmp.Diff(tc.want, got, ignoreUpdated); diff != "" {
				t.Errorf("ListJobs mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(s.reg.Jobs(), got); diff != "" {
				t.Errorf("ListJobs vs registry mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// Malformed lines get an error reply and leave the daemon serving.
func TestServerMalformedLines(t *testing.T) {
	s := startServer(t, ServerConfig{}, time.Now)
	tests := []struct {
		name string
		line []byte
		want []string
	}{
		{"not json", []byte("hello daemon"), []string{"decode request"}},
		{"empty line", []byte(""), []string{"decode request"}},
		{"binary", []byte{0, 1, 2, 0xff, 0xfe}, []string{"decode request"}},
		{"unknown field", []byte(`{"v":1,"kind":"list","sudo":true}`), []string{"unknown field", "sudo"}},
		{"trailing data", []byte(`{"v":1,"kind":"list"} {"v":1}`), []string{"trailing data"}},
		{"other version", []byte(`{"v":2,"kind":"list"}`), []string{"version 2", "speaks 1"}},
		{"too long", []byte(`{"v":1,"kind":"list","x":"` + strings.Repeat("a", wire.MaxMessage) + `"}`), []string{"read request", "longer than"}},
		{"deeply nested", []byte(`{"v":1,"kind":"job_start","event":` + strings.Repeat("[", 30000) + strings.Repeat("]", 30000) + `}`), []string{"decode request"}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := rawExchange(t, s.sock, tc.line)
			if rep.OK || rep.V != wire.Version {
				t.Errorf("reply = %+v, want an error reply of version %d", rep, wire.Version)
			}
			for _, w := range tc.want {
				if !strings.Contains(rep.Error, w) {
					t.Errorf("reply error %q lacks %q", rep.Error, w)
				}
			}
			// The daemon still works.
			if err := call(t, s.sock, jobStart(uint32(100+i))); err != nil {
				t.Fatalf("valid event after a malformed line: %v", err)
			}
		})
	}
	var want []uint32
	for i := range tests {
		want = append(want, uint32(100+i))
	}
	if diff := cmp.Diff(want, ids(listJobs(t, s.sock))); diff != "" {
		t.Errorf("recorded jobs mismatch (-want +got):\n%s", diff)
	}
}

// A client that connects and says nothing neither blocks others nor holds its
// connection much beyond ConnTimeout.
func TestServerSilentClient(t *testing.T) {
	s := startServer(t, ServerConfig{ConnTimeout: 300 * time.Millisecond}, time.Now)
	c, err := net.Dial("unix", s.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if err := call(t, s.sock, jobStart(1)); err != nil {
		t.Fatalf("event while another client is silent: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(c) // until the daemon closes the connection
	if err != nil {
		t.Errorf("silent connection: %v, want it closed by the daemon", err)
	}
	if took := time.Since(start); took < 250*time.Millisecond || took > 3*time.Second {
		t.Errorf("silent connection closed after %v, want about 300ms", took)
	}
	if diff := cmp.Diff([]uint32{1}, ids(listJobs(t, s.sock))); diff != "" {
		t.Errorf("recorded jobs mismatch (-want +got):\n%s", diff)
	}
}

// A request that does not arrive within ConnTimeout is answered with the "read request"
// error reply handle() sends for read errors, like any other unreadable request.
func TestServerSlowClientGetsErrorReply(t *testing.T) {
	s := startServer(t, ServerConfig{ConnTimeout: 300 * time.Millisecond}, time.Now)
	tests := []struct {
		name    string
		partial string // sent, without a newline, before going silent
	}{
		{"nothing sent", ""},
		{"half a request", `{"v":1,"kind":`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("unix", s.sock)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tc.partial); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			b, err := wire.ReadLine(bufio.NewReader(c))
			if err != nil {
				t.Fatalf("no reply before the daemon closed the connection: %v", err)
			}
			var rep wire.Reply
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			want := wire.Reply{V: wire.Version, Error: "read request: "}
			rep.Error = rep.Error[:min(len(rep.Error), len(want.Error))]
			if diff := cmp.Diff(want, rep); diff != "" {
				t.Errorf("reply mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// runAs runs this test binary as a client under uid/gid and returns what it printed.
func runAs(t *testing.T, uid uint32, sock string, job uint32, repeat int) clientResult {
	t.Helper()
	var res clientResult
	runClientAs(t, &syscall.Credential{Uid: uid, Gid: uid}, sock, job, repeat, "", &res)
	return res
}

// runClientAs runs this test binary as a client with cred, in mode, and decodes what it
// printed into res.
func runClientAs(t *testing.T, cred *syscall.Credential, sock string, job uint32, repeat int, mode string, res any) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary lives in a 0700 build dir: copy it where uid can execute it.
	bin := filepath.Join(socketDir(t), "client")
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), clientEnv+"="+sock, clientJobEnv+"="+strconv.FormatUint(uint64(job), 10),
		clientRepeatEnv+"="+strconv.Itoa(repeat), clientModeEnv+"="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client as uid %d: %v\nstdout: %s\nstderr: %s", cred.Uid, err, out, stderr.String())
	}
	if err := json.Unmarshal(out, res); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
}

func TestServerPeerCredentials(t *testing.T) {
	testenv.Root(t, "runs a client under uid 65534")
	const nobody = 65534
	tests := []struct {
		name    string
		allowed []uint32
		repeat  int // calls by the client
		want    clientResult
		wantIDs []uint32
	}{
		{
			name:   "non-root refused",
			repeat: 5,
			want: clientResult{UID: nobody, OK: false,
				Error: "permission denied: uid 65534 may not send job events to the persyst daemon"},
			wantIDs: []uint32{},
		},
		{
			name:    "other uid allowed is still refused",
			allowed: []uint32{1000},
			repeat:  5,
			want: clientResult{UID: nobody, OK: false,
				Error: "permission denied: uid 65534 may not send job events to the persyst daemon"},
			wantIDs: []uint32{},
		},
		{
			name:    "allowed uid",
			allowed: []uint32{nobody},
			repeat:  1,
			want:    clientResult{UID: nobody, OK: true},
			wantIDs: []uint32{77},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, ServerConfig{AllowedUIDs: tc.allowed}, time.Now)
			got := runAs(t, nobody, s.sock, 77, tc.repeat)
			// The client's error wraps the daemon's message: compare that message.
			if i := strings.Index(got.Error, "permission denied"); i >= 0 {
				got.Error = got.Error[i:]
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("client result mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantIDs, ids(listJobs(t, s.sock))); diff != "" {
				t.Errorf("recorded jobs mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestListen(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, path string)
		wantErr string
	}{
		{name: "fresh path"},
		{
			name:    "regular file in the way",
			setup:   func(t *testing.T, path string) { testenv.Write(t, path, "precious") },
			wantErr: "exists and is not a socket",
		},
		{
			name: "directory in the way",
			setup: func(t *testing.T, path string) {
				if err := os.Mkdir(path, 0o755); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "exists and is not a socket",
		},
		{
			name: "symlink to a socket in the way",
			setup: func(t *testing.T, path string) {
				other := filepath.Join(filepath.Dir(path), "other.sock")
				ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: other, Net: "unix"})
				if err != nil {
					t.Fatal(err)
				}
				ln.SetUnlinkOnClose(false)
				ln.Close()
				if err := os.Symlink(other, path); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "exists and is not a socket",
		},
		{
			name: "stale socket replaced",
			setup: func(t *testing.T, path string) {
				ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
				if err != nil {
					t.Fatal(err)
				}
				ln.SetUnlinkOnClose(false)
				ln.Close()
				if _, err := os.Lstat(path); err != nil {
					t.Fatalf("stale socket not left behind: %v", err)
				}
			},
		},
		{
			name: "live socket",
			setup: func(t *testing.T, path string) {
				ln, err := net.Listen("unix", path)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ln.Close() })
			},
			wantErr: "another daemon is answering there",
		},
		{
			name: "missing directory",
			setup: func(t *testing.T, path string) {
				if err := os.Remove(filepath.Dir(path)); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "listen",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(socketDir(t), "d", "p.sock")
			if err := os.Mkdir(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(t, path)
			}
			before, _ := os.Lstat(path)
			ln, err := Listen(path)
			if tc.wantErr != "" {
				if err == nil {
					ln.Close()
					t.Fatalf("Listen succeeded, want error containing %q", tc.wantErr)
				}
				for _, w := range []string{tc.wantErr, path} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Listen error %q lacks %q", err, w)
					}
				}
				// Whatever was there is left alone.
				after, _ := os.Lstat(path)
				if before != nil && (after == nil || !os.SameFile(before, after)) {
					t.Errorf("Listen error left %s replaced or removed", path)
				}
				return
			}
			if err != nil {
				t.Fatalf("Listen: %v", err)
			}
			st, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(os.ModeSocket|0o666, st.Mode()&(os.ModeType|os.ModePerm)); diff != "" {
				t.Errorf("socket mode mismatch (-want +got):\n%s", diff)
			}
			// The new listener answers.
			srv := NewServer(ServerConfig{AllowedUIDs: []uint32{self()}}, newReg(t, RegistryConfig{}), nil, zerolog.Nop(), time.Now)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ctx, ln) }()
			err = call(t, path, &wire.Request{Kind: wire.List})
			cancel()
			if err != nil {
				t.Errorf("list on the new socket: %v", err)
			}
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
			// Closing removes the socket.
			if _, err := os.Lstat(path); !os.IsNotExist(err) {
				t.Errorf("socket still there after Serve returned (lstat: %v)", err)
			}
		})
	}
}

// Serve returns nil soon after its context is cancelled, even with a client that has not
// sent its request yet, and new connections are refused afterwards.
func TestServeStops(t *testing.T) {
	sock := filepath.Join(socketDir(t), "s.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(ServerConfig{AllowedUIDs: []uint32{self()}, ConnTimeout: 500 * time.Millisecond}, newReg(t, RegistryConfig{}), nil, zerolog.Nop(), time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	if err := call(t, sock, &wire.Request{Kind: wire.List}); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if err := call(t, sock, &wire.Request{Kind: wire.List}); err == nil {
		t.Error("a request succeeded after Serve returned")
	}
}

// Clock is documented as injectable ("tests inject a fixed one"): with a fixed clock the
// server must still answer and stamp the job's Updated with that time.
func TestServerFixedClock(t *testing.T) {
	fixed := time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
	s := startServer(t, ServerConfig{}, func() time.Time { return fixed })
	if err := call(t, s.sock, jobStart(5)); err != nil {
		t.Fatalf("event with a fixed clock: %v", err)
	}
	want := []*Job{{
		JobID: 5, UID: 1000, GID: 1000, Node: "node1", State: Running, Persyst: wire.On,
		Started: at(0), JobStartSeen: true, Steps: []*Step{}, Updated: fixed, Recorded: fixed,
	}}
	if diff := cmp.Diff(want, s.reg.Jobs()); diff != "" {
		t.Errorf("registry mismatch (-want +got):\n%s", diff)
	}
}

// TestServerGuests: an ordinary user reads their own jobs only; members of the admin
// group (primary or supplementary) read every job.
func TestServerGuests(t *testing.T) {
	testenv.Root(t, "runs clients under other uids")
	const nobody, other, adminGID = 65534, 4000, 4242
	s := startServer(t, ServerConfig{AdminGID: adminGID}, time.Now)
	for id, uid := range map[uint32]uint32{10: nobody, 11: other} {
		e := &wire.Event{JobID: id, UID: uid, GID: uid, Persyst: wire.On, Time: time.Now()}
		if err := call(t, s.sock, &wire.Request{Kind: wire.JobStart, Event: e}); err != nil {
			t.Fatal(err)
		}
	}
	denied := "permission denied: job 11 belongs to another user"
	for _, tc := range []struct {
		name string
		cred *syscall.Credential
		job  uint32
		want readResult
	}{
		{"owner", &syscall.Credential{Uid: nobody, Gid: nobody}, 10,
			readResult{Jobs: []uint32{10}, Samples: "job 10: no samples on this node", Report: "this daemon does not measure jobs"}},
		{"another user's job", &syscall.Credential{Uid: nobody, Gid: nobody}, 11,
			readResult{Jobs: []uint32{10}, Samples: denied, Report: denied}},
		{"a job of nobody on this node", &syscall.Credential{Uid: nobody, Gid: nobody}, 12,
			readResult{Jobs: []uint32{10}, Samples: "job 12: not known on this node", Report: "job 12: not known on this node"}},
		{"admin group as primary group", &syscall.Credential{Uid: 4001, Gid: adminGID}, 11,
			readResult{Jobs: []uint32{10, 11}, Samples: "job 11: no samples on this node", Report: "this daemon does not measure jobs"}},
		{"admin group as supplementary group", &syscall.Credential{Uid: 4002, Gid: 4002, Groups: []uint32{7, adminGID}}, 11,
			readResult{Jobs: []uint32{10, 11}, Samples: "job 11: no samples on this node", Report: "this daemon does not measure jobs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got readResult
			runClientAs(t, tc.cred, s.sock, tc.job, 0, "read", &got)
			// The client's errors wrap the daemon's message: compare that message.
			for _, e := range []*string{&got.Samples, &got.Report} {
				for _, w := range []string{tc.want.Samples, tc.want.Report} {
					if i := strings.Index(*e, w); i >= 0 && w != "" {
						*e = (*e)[i:]
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestServerGuestFlood: while an ordinary user floods the socket with requests from
// several connections, root's events all go through, the flood is held to its rate, and
// the log stays short (the first refusal of the user; the rest summed up each minute).
func TestServerGuestFlood(t *testing.T) {
	testenv.Root(t, "runs a client under uid 65534")
	var logged syncBuffer
	reg := newReg(t, RegistryConfig{Node: "node1", Dir: t.TempDir()})
	sock := filepath.Join(socketDir(t), "persyst.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(ServerConfig{}, reg, nil, zerolog.New(&logged), time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()

	var flood readResult
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		runClientAs(t, &syscall.Credential{Uid: 65534, Gid: 65534}, sock, 1, 3000, "flood", &flood)
	}()
	time.Sleep(200 * time.Millisecond)
	var slowest time.Duration
	for i := uint32(1); i <= 100; i++ {
		start := time.Now()
		if err := call(t, sock, jobStart(i)); err != nil {
			t.Fatalf("root's event %d during the flood: %v", i, err)
		}
		slowest = max(slowest, time.Since(start))
		time.Sleep(10 * time.Millisecond)
	}
	<-flooded
	t.Logf("flood: %d requests, %d refused as busy; root's slowest event %v; %d refusals counted; log %d bytes",
		flood.Calls, flood.Busy, slowest, srv.refused.Total(), logged.Len())
	if len(reg.Jobs()) != 100 {
		t.Errorf("%d jobs recorded, want 100", len(reg.Jobs()))
	}
	if flood.Busy == 0 || srv.refused.Total() == 0 {
		t.Errorf("the flood was not limited: %d of %d requests refused", flood.Busy, flood.Calls)
	}
	if allowed := 3*guestRate + guestBurst; flood.Calls-flood.Busy > allowed+5 {
		t.Errorf("%d requests of the flood served in 3 s, want at most about %d", flood.Calls-flood.Busy, allowed)
	}
	if n := strings.Count(logged.String(), "refused"); n > 2 {
		t.Errorf("%d log lines about refusals in 3 s, want 1 (the rest is summed up each minute):\n%s", n, logged.String())
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writes (the server's log).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// A step's start without cgroups gets those of its sender: the kernel names the peer's
// pid, and the daemon reads that process's cgroup membership (a fake /proc here, with this
// test process's pid). Cgroups the event names are kept as sent.
func TestServerStepCgroupsFromSender(t *testing.T) {
	root := t.TempDir()
	proc := filepath.Join(root, "proc", strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(proc, 0o755); err != nil {
		t.Fatal(err)
	}
	mountinfo := "30 25 0:26 / /sys/fs/cgroup/freezer rw,nosuid - cgroup cgroup rw,freezer\n" +
		"31 25 0:27 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n"
	cgroup := "7:freezer:/slurm_node1/uid_1000/job_42/step_batch\n5:memory:/slurm_node1/uid_1000/job_42/step_batch/task_0\n"
	for name, body := range map[string]string{"mountinfo": mountinfo, "cgroup": cgroup} {
		if err := os.WriteFile(filepath.Join(proc, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	host := hostfs.New(root)
	ts := startServer(t, ServerConfig{Host: &host}, time.Now)
	now := time.Now().UTC()
	for _, job := range []uint32{42, 43} {
		e := ev(job, "", now)
		if err := call(t, ts.sock, &wire.Request{Kind: wire.JobStart, Event: &e}); err != nil {
			t.Fatal(err)
		}
	}
	e := ev(42, "batch", now)
	if err := call(t, ts.sock, &wire.Request{Kind: wire.StepStart, Event: &e}); err != nil {
		t.Fatal(err)
	}
	named := ev(43, "batch", now, func(e *wire.Event) { e.Cgroups = map[string]string{"freezer": "/sys/fs/cgroup/freezer/x/job_43"} })
	if err := call(t, ts.sock, &wire.Request{Kind: wire.StepStart, Event: &named}); err != nil {
		t.Fatal(err)
	}
	want := map[uint32]map[string]string{
		42: {"freezer": "/sys/fs/cgroup/freezer/slurm_node1/uid_1000/job_42", "memory": "/sys/fs/cgroup/memory/slurm_node1/uid_1000/job_42"},
		43: {"freezer": "/sys/fs/cgroup/freezer/x/job_43"},
	}
	for job, w := range want {
		j := ts.reg.Job(job)
		if j == nil {
			t.Fatalf("job %d not registered", job)
		}
		if diff := cmp.Diff(w, j.Cgroups); diff != "" {
			t.Errorf("job %d cgroups (-want +got):\n%s", job, diff)
		}
	}
}
