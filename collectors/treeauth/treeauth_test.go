package treeauth

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/internal/testenv"
)

// munged starts a real munged with its own key and socket in a temporary directory and
// returns a Munger that reaches it. MUNGE is what every Slurm site runs; nothing of it is
// faked here.
func munged(t testing.TB) Munger {
	t.Helper()
	testenv.Program(t, "munged", "munge")
	testenv.Root(t, "the tree's authentication tests run munged and switch users")
	// The socket's directory must be reachable by uid 65534 (the intruder's munge).
	dir, err := os.MkdirTemp("/tmp", "persyst-munge-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, bytes.Repeat([]byte("persyst-test-key"), 64), 0o400); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	cmd := exec.Command("munged", "--foreground", "--force", "--key-file="+key, "--socket="+sock,
		"--pid-file="+filepath.Join(dir, "pid"), "--log-file="+filepath.Join(dir, "log"), "--seed-file="+filepath.Join(dir, "seed"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(sock); err == nil {
			return Munger{Socket: sock}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("munged did not start: %s", out.String())
	return Munger{}
}

// asNobody returns m with its commands run as uid 65534: an ordinary user's credentials.
func asNobody(t *testing.T, m Munger) Munger {
	t.Helper()
	dir := t.TempDir()
	for _, c := range []string{"munge", "unmunge"} {
		script := fmt.Sprintf("#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups %s \"$@\"\n", c)
		if err := os.WriteFile(filepath.Join(dir, c), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m.Munge, m.Unmunge = filepath.Join(dir, "munge"), filepath.Join(dir, "unmunge")
	return m
}

// recorder is a tree server that records who called it.
type recorder struct {
	pb.UnimplementedCollectorServer
	pb.UnimplementedNodeServer
	mu    sync.Mutex
	peers []string
}

func (r *recorder) note(ctx context.Context) {
	p := PeerOf(ctx)
	r.mu.Lock()
	r.peers = append(r.peers, p.Identity.String())
	r.mu.Unlock()
}

func (r *recorder) Push(ctx context.Context, in *pb.CycleRecords) (*pb.Ack, error) {
	r.note(ctx)
	return &pb.Ack{Ok: true}, nil
}

func (r *recorder) PushPartial(ctx context.Context, in *pb.PartialCycle) (*pb.Ack, error) {
	r.note(ctx)
	return &pb.Ack{Ok: true}, nil
}

func (r *recorder) Summary(ctx context.Context, in *pb.JobSummaryRequest) (*pb.JobSummary, error) {
	r.note(ctx)
	return &pb.JobSummary{JobId: in.JobId}, nil
}

func (r *recorder) SetRoutes(ctx context.Context, in *pb.Routes) (*pb.RoutesAck, error) {
	r.note(ctx)
	return &pb.RoutesAck{Ok: true}, nil
}

func (r *recorder) Ping(ctx context.Context, in *pb.Heartbeat) (*pb.Heartbeat, error) {
	r.note(ctx)
	return &pb.Heartbeat{}, nil
}

func (r *recorder) Report(ctx context.Context, in *pb.JobSummaryRequest) (*pb.JobSummary, error) {
	r.note(ctx)
	return &pb.JobSummary{JobId: in.JobId}, nil
}

func (r *recorder) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.peers...)
}

// serve runs a tree server with t's authentication on loopback.
func serve(tb testing.TB, tr *Tree) (string, *recorder) {
	tb.Helper()
	opts, err := tr.ServerOptions()
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	rec := &recorder{}
	pb.RegisterCollectorServer(srv, rec)
	pb.RegisterNodeServer(srv, rec)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go srv.Serve(ln)
	tb.Cleanup(srv.Stop)
	return ln.Addr().String(), rec
}

func tree(tb testing.TB, o Options) *Tree {
	tb.Helper()
	tr, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	return tr
}

// callCase is a call of method over dial and its expected outcome: a gRPC code (OK:
// answered) and text in the error.
type callCase struct {
	name   string
	dial   grpc.DialOption
	method string
	want   codes.Code
	msg    string
}

func runCalls(t *testing.T, addr string, cases []callCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := call(addr, tc.dial, tc.method)
			if got := status.Code(err); got != tc.want || (tc.msg != "" && !strings.Contains(fmt.Sprint(err), tc.msg)) {
				t.Errorf("%s: got %v (%v), want %v with %q", tc.method, got, err, tc.want, tc.msg)
			}
		})
	}
}

// call makes one call of method on addr with dial and returns its error.
func call(addr string, dial grpc.DialOption, method string) error {
	conn, err := grpc.NewClient(addr, dial)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var ack *pb.Ack
	switch method {
	case "Push":
		ack, err = pb.NewCollectorClient(conn).Push(ctx, &pb.CycleRecords{JobId: 7, Node: "node1", Ts: 1})
	case "PushOther":
		ack, err = pb.NewCollectorClient(conn).Push(ctx, &pb.CycleRecords{JobId: 7, Node: "node2", Ts: 1})
	case "PushPartial":
		ack, err = pb.NewCollectorClient(conn).PushPartial(ctx, &pb.PartialCycle{JobId: 7, Ts: 1, From: "col1"})
	case "Summary":
		_, err = pb.NewCollectorClient(conn).Summary(ctx, &pb.JobSummaryRequest{JobId: 7})
	case "SetRoutes":
		var rack *pb.RoutesAck
		if rack, err = pb.NewNodeClient(conn).SetRoutes(ctx, &pb.Routes{}); rack != nil {
			ack = &pb.Ack{Ok: rack.Ok, Error: rack.Error}
		}
	case "Report":
		_, err = pb.NewNodeClient(conn).Report(ctx, &pb.JobSummaryRequest{JobId: 7})
	default:
		return fmt.Errorf("no method %s", method)
	}
	if err == nil && ack != nil && !ack.Ok {
		err = fmt.Errorf("not acknowledged: %s", ack.Error)
	}
	return err
}

func dialOf(tb testing.TB, tr *Tree, expect ...Role) grpc.DialOption {
	tb.Helper()
	d, err := tr.DialOption(expect...)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// TestMunge: agents of the tree (credentials of root) reach each other and each knows
// the other's identity; an ordinary user's credential, a plain connection, a stranger
// speaking TLS, and a server run by an ordinary user are all refused; each role may call
// only its methods.
func TestMunge(t *testing.T) {
	m := munged(t)
	log := zerolog.New(io.Discard)
	collector := tree(t, Options{Self: Identity{Collector, "col1"}, Munge: m, Log: log})
	addr, rec := serve(t, collector)
	node1 := tree(t, Options{Self: Identity{Node, "node1"}, Munge: m, Log: log})
	front := tree(t, Options{Self: Identity{Frontend, "front"}, Munge: m, Log: log})
	intruder := tree(t, Options{Self: Identity{Node, "node1"}, Munge: asNobody(t, m), Log: log})

	runCalls(t, addr, []callCase{
		{"node pushes its records", dialOf(t, node1, Collector), "Push", codes.OK, ""},
		{"node asks for a summary", dialOf(t, node1), "Summary", codes.OK, ""},
		{"node pushes another node's records", dialOf(t, node1), "PushOther", codes.PermissionDenied, `may not push records of node "node2"`},
		{"node pushes a collector's summary", dialOf(t, node1), "PushPartial", codes.PermissionDenied, "may not call"},
		{"node sets routes", dialOf(t, node1), "SetRoutes", codes.PermissionDenied, "node/node1 may not call /persyst.v1.Node/SetRoutes"},
		{"frontend sets routes", dialOf(t, front), "SetRoutes", codes.OK, ""},
		{"frontend pushes records", dialOf(t, front), "Push", codes.PermissionDenied, "may not call"},
		{"ordinary user's credential", dialOf(t, intruder), "Push", codes.Unavailable, "uid 65534, which is not an agent"},
		{"plain connection", grpc.WithTransportCredentials(insecure.NewCredentials()), "Summary", codes.Unavailable, ""},
		{"node expecting a frontend", dialOf(t, node1, Frontend), "Push", codes.Unavailable, "the server is collector/col1, not a frontend"},
	})
	want := []string{"node/node1", "node/node1", "frontend/front"}
	if got := rec.calls(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("the server saw %v, want %v", got, want)
	}

	// A server run by an ordinary user (a port taken while the collector was down) is
	// not believed: the node sends it nothing.
	fakeAddr, fakeRec := serve(t, tree(t, Options{Self: Identity{Collector, "col1"}, Munge: asNobody(t, m), Log: log}))
	if err := call(fakeAddr, dialOf(t, node1), "Push"); err == nil || !strings.Contains(err.Error(), "uid 65534") {
		t.Errorf("a server of uid 65534: %v", err)
	}
	if got := fakeRec.calls(); len(got) != 0 {
		t.Errorf("the fake server got calls: %v", got)
	}
}

// TestMungeUsers: a node daemon's server takes users' credentials (role user, named by
// the uid munged vouches for) for reports only; a user may not pose as another user or
// as an agent, and servers that do not take users refuse them at the handshake.
func TestMungeUsers(t *testing.T) {
	m := munged(t)
	log := zerolog.New(io.Discard)
	node := tree(t, Options{Self: Identity{Node, "node1"}, Munge: m, AcceptUsers: true, Log: log})
	addr, rec := serve(t, node)
	collectorAddr, _ := serve(t, tree(t, Options{Self: Identity{Collector, "col1"}, Munge: m, Log: log}))
	user := tree(t, Options{Self: Identity{User, "65534"}, Munge: asNobody(t, m), Log: log})
	impostor := tree(t, Options{Self: Identity{User, "1000"}, Munge: asNobody(t, m), Log: log})
	root := tree(t, Options{Self: Identity{User, "0"}, Munge: m, Log: log})
	if _, err := New(Options{Mode: TLS, Self: Identity{User, "65534"}}); err == nil {
		t.Errorf("a user with TLS: no error")
	}
	runCalls(t, addr, []callCase{
		{"user reads a report", dialOf(t, user, Node), "Report", codes.OK, ""},
		{"root as a user reads a report", dialOf(t, root, Node), "Report", codes.OK, ""},
		{"user sets routes", dialOf(t, user, Node), "SetRoutes", codes.PermissionDenied, "user/65534 may not call"},
		{"user claims another uid", dialOf(t, impostor, Node), "Report", codes.Unavailable, "a user credential of uid 65534 naming"},
		{"agent reads a report", dialOf(t, tree(t, Options{Self: Identity{Node, "node2"}, Munge: m, Log: log}), Node), "Report", codes.PermissionDenied, "may not call"},
	})
	if err := call(collectorAddr, dialOf(t, user), "Summary"); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not an agent") {
		t.Errorf("a user at a collector: %v", err)
	}
	want := []string{"user/65534", "user/0"}
	if got := rec.calls(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("the node's server saw %v, want %v", got, want)
	}
}

// TestMungeHandshakeAttacks: a stranger who speaks TLS and sends garbage, a credential
// of root's made for another connection (a replay of one seen on the network), and an
// over-long line are all refused with a reason, and the server goes on serving.
func TestMungeHandshakeAttacks(t *testing.T) {
	m := munged(t)
	var logBuf bytes.Buffer
	collector := tree(t, Options{Self: Identity{Collector, "col1"}, Munge: m, Log: zerolog.New(&logBuf)})
	addr, _ := serve(t, collector)
	ctx := context.Background()

	// A real credential of root's, naming a well-formed identity, but bound to another
	// session.
	other, err := m.Encode(ctx, []byte(`{"v":1,"role":"node","name":"node1","bind":"c29tZSBvdGhlciBzZXNzaW9u"}`))
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]struct{ line, why string }{
		"garbage":              {"hello\n", "not a persyst tree handshake"},
		"another connection":   {greeting + other + "\n", "made for another connection"},
		"not a credential":     {greeting + "MUNGE:AAAA:\n", "unmunge"},
		"over-long":            {greeting + strings.Repeat("A", 3*maxCred) + "\n", "over-long"},
		"credential of nobody": {"", "uid 65534"},
	}
	nobody := asNobody(t, m)
	for name, tc := range lines {
		t.Run(name, func(t *testing.T) {
			line := tc.line
			conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS13})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			if line == "" { // a credential of uid 65534 bound to this very session
				st := conn.ConnectionState()
				k, _ := st.ExportKeyingMaterial(exporterLabel, nil, 32)
				cred, err := nobody.Encode(ctx, []byte(fmt.Sprintf(`{"v":1,"role":"node","name":"node1","bind":%q}`, b64(k))))
				if err != nil {
					t.Fatal(err)
				}
				line = greeting + cred + "\n"
			}
			io.WriteString(conn, line)
			answer, _ := io.ReadAll(conn)
			if !strings.HasPrefix(string(answer), greeting+refusedPrefix) || !strings.Contains(string(answer), tc.why) {
				t.Errorf("answer %q, want a refusal for %q", answer, tc.why)
			}
		})
	}
	node1 := tree(t, Options{Self: Identity{Node, "node1"}, Munge: m, Log: zerolog.New(io.Discard)})
	if err := call(addr, dialOf(t, node1), "Push"); err != nil {
		t.Errorf("after the attacks, an agent is refused: %v", err)
	}
	if collector.Refused() < uint64(len(lines)) {
		t.Errorf("%d refusals counted, want at least %d", collector.Refused(), len(lines))
	}
}

// TestRefusalLogBounded: a flood of refused connections writes at most one log line in
// ten seconds, which counts them.
func TestRefusalLogBounded(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	r := newRefusalLog(zerolog.New(&buf), func() time.Time { return now })
	for i := 0; i < 100_000; i++ {
		if i%1000 == 0 {
			now = now.Add(time.Second) // 100 s of flood
		}
		r.add(stages[i%len(stages)], "10.0.0.9:4242", "garbage\x1b[31m")
	}
	lines := strings.Count(buf.String(), "\n")
	if lines > 11 || lines < 9 {
		t.Errorf("%d log lines for 100 s of flood, want one in 10 s", lines)
	}
	if strings.Contains(buf.String(), "\x1b") {
		t.Errorf("a control character reached the log: %q", buf.String())
	}
	if r.total() != 100_000 {
		t.Errorf("counted %d refusals, want 100000", r.total())
	}
	by := r.byStageMap()
	if by[StageHandshake]+by[StageStorm]+by[StageCall] != 100_000 || by[StageCall] != 33_333 {
		t.Errorf("counted by stage %v, want 33,334 + 33,333 + 33,333", by)
	}
}

func TestParseUnmunge(t *testing.T) {
	tests := []struct {
		in      string
		want    Decoded
		wantErr string
	}{
		{"STATUS:          0\nENCODE_HOST:     10.0.0.1\nUID:             0\nGID:             0\n\n{\"v\":1}",
			Decoded{UID: 0, GID: 0, Host: "10.0.0.1", Payload: []byte(`{"v":1}`)}, ""},
		{"STATUS:          Success (0)\nUID:             root (0)\nGID:             0\n\n", Decoded{}, "UID"},
		{"STATUS:          Replayed credential (17)\nUID:             0\nGID:             0\n\n", Decoded{}, "Replayed"},
		{"UID: 0\nGID: 0\n\n", Decoded{}, "no status"},
	}
	for _, tc := range tests {
		got, err := parseUnmunge([]byte(tc.in))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseUnmunge(%q): error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got.UID != tc.want.UID || got.Host != tc.want.Host || !bytes.Equal(got.Payload, tc.want.Payload) {
			t.Errorf("parseUnmunge(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// BenchmarkMungeHandshake: one new authenticated connection and its first call (TLS,
// a credential each way through munge and unmunge, with a real munged). Connections of
// the tree are long-lived: this is paid once per agent pair, not per call.
func BenchmarkMungeHandshake(b *testing.B) {
	m := munged(b)
	log := zerolog.New(io.Discard)
	addr, _ := serve(b, tree(b, Options{Self: Identity{Collector, "col1"}, Munge: m, Log: log}))
	dial := dialOf(b, tree(b, Options{Self: Identity{Node, "node1"}, Munge: m, Log: log}))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := call(addr, dial, "Push"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAuthorizedCall: a call on an established authenticated connection.
func BenchmarkAuthorizedCall(b *testing.B) {
	m := munged(b)
	log := zerolog.New(io.Discard)
	addr, _ := serve(b, tree(b, Options{Self: Identity{Collector, "col1"}, Munge: m, Log: log}))
	conn, err := grpc.NewClient(addr, dialOf(b, tree(b, Options{Self: Identity{Node, "node1"}, Munge: m, Log: log})))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	cl := pb.NewCollectorClient(conn)
	in := &pb.CycleRecords{JobId: 7, Node: "node1", Ts: 1}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := cl.Push(context.Background(), in); err != nil {
			b.Fatal(err)
		}
	}
}
