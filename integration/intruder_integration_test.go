package integration

// An intruder on the cluster's network tries the agent tree: as an ordinary user (its own
// uid, its own MUNGE credentials) and as a node's root claiming its node. This file's
// intruder is this test binary, re-executed (PERSYST_IT_INTRUDER).

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/treeauth"
)

// intrusion is one call the intruder makes.
type intrusion struct {
	Target string `json:"target"` // host:port of an agent
	// Mode is "plain", "munge" (its own uid's credentials), "tls" (the files TLS) or
	// "tls-nocert" (TLS without a certificate).
	Mode   string            `json:"mode"`
	As     string            `json:"as"`     // the identity it claims: "node/node1"
	Munge  string            `json:"munge"`  // munged's socket
	Method string            `json:"method"` // Push, PushPartial, Summary, Partial, Ping, SetRoutes, NodePing
	Job    uint32            `json:"job"`
	Node   string            `json:"node"` // whose records it pushes
	Addr   string            `json:"addr"` // an address the message names (aggregation point, holders, routes)
	TLS    treeauth.TLSFiles `json:"tls"`
}

// outcome is what happened.
type outcome struct {
	OK    bool   `json:"ok"`
	Code  string `json:"code"`
	Error string `json:"error"`
}

// intrude runs in the re-executed test binary: it makes one call and prints its outcome.
func intrude(spec string) int {
	var in intrusion
	if err := json.Unmarshal([]byte(spec), &in); err != nil {
		fmt.Println(err)
		return 2
	}
	out := in.call()
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	return 0
}

func (in intrusion) call() outcome {
	dial := grpc.WithTransportCredentials(insecure.NewCredentials())
	role, name, _ := strings.Cut(in.As, "/")
	switch in.Mode {
	case "munge", "tls":
		tr, err := treeauth.New(treeauth.Options{Mode: treeauth.Mode(in.Mode), Self: treeauth.Identity{Role: treeauth.Role(role), Name: name},
			Munge: treeauth.Munger{Socket: in.Munge}, TLS: in.TLS, Log: zerolog.Nop()})
		if err != nil {
			return outcome{Error: err.Error()}
		}
		if dial, err = tr.DialOption(); err != nil {
			return outcome{Error: err.Error()}
		}
	case "tls-nocert":
		dial = grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}))
	}
	conn, err := grpc.NewClient(in.Target, dial)
	if err != nil {
		return outcome{Error: err.Error()}
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	col, node := pb.NewCollectorClient(conn), pb.NewNodeClient(conn)
	recs := &pb.CycleRecords{JobId: in.Job, Node: in.Node, Ts: time.Now().Unix(), Seconds: 1, AggregationPoint: in.Addr,
		Records: []*pb.Record{{Key: "cpu_user_pct", Device: "cpu0", Value: 50}}}
	var ack *pb.Ack
	switch in.Method {
	case "Push":
		ack, err = col.Push(ctx, recs)
	case "PushPartial":
		ack, err = col.PushPartial(ctx, &pb.PartialCycle{JobId: in.Job, Ts: time.Now().Unix(), From: "col1"})
	case "Summary":
		_, err = col.Summary(ctx, &pb.JobSummaryRequest{JobId: in.Job, Holders: []string{in.Addr}})
	case "Partial":
		_, err = col.Partial(ctx, &pb.JobSummaryRequest{JobId: in.Job})
	case "Ping":
		_, err = col.Ping(ctx, &pb.Heartbeat{Name: "frontend", Role: "frontend", Tree: []string{in.Addr}})
	case "SetRoutes":
		var rack *pb.RoutesAck
		rack, err = node.SetRoutes(ctx, &pb.Routes{Routes: []*pb.Route{{JobId: in.Job, AggregationPoint: in.Addr,
			NodeCollector: map[string]string{in.Node: in.Addr}}}})
		if rack != nil {
			ack = &pb.Ack{Ok: rack.Ok, Error: rack.Error}
		}
	case "NodePing":
		_, err = node.Ping(ctx, &pb.Heartbeat{})
	default:
		return outcome{Error: "no method " + in.Method}
	}
	if err != nil {
		return outcome{Code: status.Code(err).String(), Error: err.Error()}
	}
	if ack != nil && !ack.Ok {
		return outcome{Code: "Refused", Error: ack.Error}
	}
	return outcome{OK: true, Code: "OK"}
}

// selfCopy copies this test binary where an ordinary user may run it.
func selfCopy(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "persyst-it-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	// Copied by cp, not written from here: a test beside this one that forks while this
	// process holds the copy open for writing passes that descriptor to its child until
	// the child's exec, and the copy's own exec then fails with "text file busy".
	bin := filepath.Join(dir, "it")
	if out, err := exec.Command("cp", fmt.Sprintf("/proc/%d/exe", os.Getpid()), bin).CombinedOutput(); err != nil {
		t.Fatalf("copy the test binary: %v: %s", err, out)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// attempt runs one intrusion, as the job user (uid 65534) or as root, and returns its
// outcome.
func attempt(t *testing.T, bin string, asRoot bool, in intrusion) outcome {
	t.Helper()
	spec, _ := json.Marshal(in)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "PERSYST_IT_INTRUDER="+string(spec))
	if !asRoot {
		cmd.SysProcAttr = asUser()
	}
	b, err := cmd.Output()
	var out outcome
	if err != nil || json.Unmarshal(b, &out) != nil {
		t.Fatalf("intruder %s: %v: %s", spec, err, b)
	}
	return out
}

// testIntruder: every call of an ordinary user is refused, with a plain connection or
// with its own MUNGE credentials, whatever identity it claims; a node's root (a
// compromised node daemon) pushes only its own node's records, only for jobs Slurm runs
// there, sets no routes, and makes no agent call an address it names; the job's digest
// is untouched.
func testIntruder(t *testing.T, c *cluster, submit func(args ...string) uint32, out func(uint32) string) {
	base := c.netPrefix(t)
	munge := filepath.Join(c.dir, "munge", "munge.sock")
	col1, sync1, front := c.agentAddr(t, "Collector", "col1"), c.syncAddr(t, "sync1"), c.frontAddr(t)
	node1, node2 := base+".11:16831", base+".12:16831"
	n1, n2 := c.nodes[0], c.nodes[1] // the addresses' nodes
	bin := selfCopy(t)

	// The bait: an address the intruder names; no agent may ever connect to it.
	ln, err := net.Listen("tcp", base+".1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var called atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			called.Add(1)
			conn.Close()
		}
	}()
	bait := ln.Addr().String()

	id := submit("-N1", "-w", n1, "--wrap", "sleep 12")
	c.waitRunning(t, id)

	targets := map[string][]string{
		col1:  {"Push", "PushPartial", "Summary", "Partial", "Ping"},
		sync1: {"PushPartial", "Summary", "Partial", "Ping"},
		front: {"PushPartial", "Summary", "Ping"},
		node1: {"SetRoutes", "NodePing"},
	}
	for target, methods := range targets {
		for _, m := range methods {
			for _, mode := range []string{"plain", "munge"} {
				for _, as := range []string{"node/" + n1, "frontend/front", "collector/col1"} {
					in := intrusion{Target: target, Mode: mode, As: as, Munge: munge, Method: m, Job: id, Node: n1, Addr: bait}
					o := attempt(t, bin, false, in)
					if o.OK || (mode == "munge" && !strings.Contains(o.Error, "uid 65534")) {
						t.Errorf("uid 65534, %s as %s: %s on %s: %+v; want refused (munge: for its uid)", mode, as, m, target, o)
					}
					if mode == "plain" {
						break // the claimed identity does not matter
					}
				}
			}
		}
	}

	// A node's root, as its node.
	root := func(target, method string, job uint32, node string) outcome {
		return attempt(t, bin, true, intrusion{Target: target, Mode: "munge", As: "node/" + n1, Munge: munge,
			Method: method, Job: job, Node: node, Addr: bait})
	}
	refusals := []struct {
		name, target, method string
		job                  uint32
		node, want           string
	}{
		{"another node's records", col1, "Push", id, n2, `may not push records of node "` + n2 + `"`},
		{"a job Slurm does not know", col1, "Push", 4_000_000, n1, "Slurm does not know it"},
		{"routes", node2, "SetRoutes", id, n2, "may not call /persyst.v1.Node/SetRoutes"},
		{"a collector's summary", col1, "PushPartial", id, n1, "may not call"},
		{"the frontend's ping", col1, "Ping", id, n1, "may not call"},
	}
	for _, r := range refusals {
		if o := root(r.target, r.method, r.job, r.node); o.OK || !strings.Contains(o.Error, r.want) {
			t.Errorf("node1's root: %s: %+v; want refused with %q", r.name, o, r.want)
		}
	}
	// Its own job's records naming the bait as aggregation point, and a summary naming
	// the bait as holder: taken or answered, but the bait is never called.
	if o := root(col1, "Push", id, n1); !o.OK {
		t.Errorf("node1's root pushing node1's records of job %d: %+v", id, o)
	}
	for _, target := range []string{col1, sync1, front} {
		root(target, "Summary", id, n1)
	}
	if st := c.waitDone(t, id, time.Minute); st != "COMPLETED" {
		t.Fatalf("job %d ended %s", id, st)
	}
	time.Sleep(2 * time.Second) // a forwarding collector retries within a second
	if n := called.Load(); n != 0 {
		t.Errorf("agents called the address a message named %d times", n)
	}
	if text := out(id); strings.ContainsAny(text, "\x1b\x07") || !strings.Contains(text, "persyst") {
		t.Errorf("job %d's output:\n%q", id, text)
	}
	// The agents' databases are theirs: an ordinary user's `persyst report --db` fails.
	for _, db := range []string{"col1.db", "sync1.db", "frontend.db"} {
		cmd := exec.Command(persystBin(), "report", "--db", filepath.Join(c.dir, "run", db), fmt.Sprint(id))
		cmd.SysProcAttr = asUser()
		if b, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("uid %d reads %s:\n%s", jobUser, db, b)
		}
	}
	for _, agent := range []string{"collector-col1", "sync-sync1", "frontend"} {
		if log := c.readLog(t, agent); !strings.Contains(log, "refused a connection or call of the agent tree") {
			t.Errorf("%s logged no refusal:\n%s", agent, tail(log, 5))
		}
	}
}

// netPrefix is the cluster network's first three octets (the collectors' addresses).
func (c *cluster) netPrefix(t *testing.T) string {
	t.Helper()
	return netOf(c.agentAddr(t, "Collector", "col1"))
}

// netOf is the first three octets of an agent's address (host:port).
func netOf(addr string) string {
	host, _, _ := strings.Cut(addr, ":")
	return host[:strings.LastIndexByte(host, '.')]
}
