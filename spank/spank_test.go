package spank

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/spank/options"
)

// goParse is the Go reference's answer, in the shape of the C one.
func goParse(args []string) (options.Config, []string) {
	cfg, errs := options.ParseArgs(args)
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	return cfg, msgs
}

// The plugin's C parser and the Go reference agree on every argument list: the same
// configuration and the same messages.
func TestParseArgsAgreesWithGo(t *testing.T) {
	long := "/" + strings.Repeat("s", 106)
	for _, args := range [][]string{
		nil,
		{"default=off"}, {"default=on"}, {"default=On"}, {"default="}, {"default"},
		{"socket=/x/y.sock"}, {"socket=x.sock"}, {"socket=/"}, {"socket=/a//b"}, {"socket=/a/./b"},
		{"socket=/a/../b"}, {"socket=/a/.."}, {"socket=/a/."}, {"socket=/a/"}, {"socket=/a/.b"}, {"socket=/a/..b"},
		{"socket=" + long}, {"socket=" + long + "x"}, {"socket=/a\nb"},
		{"timeout=2.5"}, {"timeout=10"}, {"timeout=0.001"}, {"timeout=300"}, {"timeout=300.0000001"},
		{"timeout=0.0009999"}, {"timeout=-1"}, {"timeout=+1"}, {"timeout=1e3"}, {"timeout=0x10"}, {"timeout=NaN"},
		{"timeout=inf"}, {"timeout= 5"}, {"timeout=5 "}, {"timeout=."}, {"timeout=.5"}, {"timeout=5."}, {"timeout=1.2.3"},
		{"timeout=" + strings.Repeat("9", 64)}, {"timeout=" + strings.Repeat("0", 63) + "1"}, {"timeout=" + strings.Repeat("1", 65)},
		{"timeout=0.0010000000000000001"}, {"timeout=299.99999999999"},
		{"report=/opt/persyst/bin/persyst"}, {"report=off"}, {"report=persyst"}, {"report=/a\nb"}, {"report=/"},
		{"report=" + "/" + strings.Repeat("r", 4094)}, {"report=" + "/" + strings.Repeat("r", 4095)},
		{"color=blue"}, {"Default=off"}, {"=on"}, {""}, {"=", "=="},
		{"default=off", "default=on"}, {"color=1", "color=2"}, {"a=1", "b", "a=2", "=x"},
		{"default=off", "socket=/run/p/p.sock", "timeout=1", "report=off"},
		{"socket=/run/p/p.sock", "socket=bad", "timeout=bad", "report=bad", "default=bad"},
		{"weird=\"quoted\\\"", "tab=\t", "bell=\a\x7f"},
	} {
		wantCfg, wantMsgs := goParse(args)
		gotCfg, gotMsgs := parseArgs(args)
		if diff := cmp.Diff(wantCfg, gotCfg); diff != "" {
			t.Errorf("%.80q: configuration (-go +c):\n%s", args, diff)
		}
		short := true // C cuts quoted arguments short at a few hundred bytes
		for _, a := range args {
			short = short && len(a) < 250
		}
		if !short {
			if len(wantMsgs) != len(gotMsgs) {
				t.Errorf("%.80q: %d errors from Go, %d from C", args, len(wantMsgs), len(gotMsgs))
			}
			continue
		}
		if diff := cmp.Diff(wantMsgs, gotMsgs); diff != "" {
			t.Errorf("%q: errors (-go +c):\n%s", args, diff)
		}
	}
}

// FuzzParseArgs: for any arguments, the C parser and the Go reference agree on the
// configuration and on how many arguments are wrong (messages differ only in how bytes
// above ASCII are quoted).
func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{"default=off socket=/a/b timeout=1.5", "report=off default=on", "timeout=.001 timeout=2", "=x y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsRune(s, 0) {
			return // a C argument cannot hold a NUL
		}
		args := strings.Fields(s)
		wantCfg, wantMsgs := goParse(args)
		gotCfg, gotMsgs := parseArgs(args)
		if diff := cmp.Diff(wantCfg, gotCfg); diff != "" {
			t.Errorf("%q: configuration (-go +c):\n%s", args, diff)
		}
		if len(wantMsgs) != len(gotMsgs) {
			t.Errorf("%q: %d errors from Go, %d from C:\n%q\n%q", args, len(wantMsgs), len(gotMsgs), wantMsgs, gotMsgs)
		}
	})
}

func TestParseValue(t *testing.T) {
	for _, v := range []string{"on", "off", "On", "OFF", "", "yes", "on ", "1"} {
		want := -1
		if on, err := options.ParseValue(v); err == nil {
			want = map[bool]int{true: 1, false: 0}[on]
		}
		if got := parseValue(v); got != want {
			t.Errorf("parseValue(%q) = %d, want %d (the Go reference)", v, got, want)
		}
	}
}

func ptr(s string) *string { return &s }

// Every event the C side encodes is a request the daemon accepts, carrying the fields
// the plugin was given.
func TestEncodeIsAValidRequest(t *testing.T) {
	now := time.Date(2026, 11, 25, 4, 5, 6, 7890, time.UTC)
	status := 256
	zero := 0
	tests := []struct {
		name      string
		kind      int
		ev        event
		defaultOn bool
		want      wire.Request
	}{
		{
			name: "job start, option not given, site default on", kind: kindJobStart, defaultOn: true,
			ev:   event{JobID: 7, UID: 1000, GID: 100, ArrayJobID: 7, ArrayTaskID: 0xfffffffe, Option: -1},
			want: wire.Request{V: 1, Kind: wire.JobStart, Event: &wire.Event{JobID: 7, UID: 1000, GID: 100, Persyst: "on", Time: now}},
		},
		{
			name: "job start with GPUs (the prolog's)", kind: kindJobStart, defaultOn: true,
			ev:   event{JobID: 8, UID: 1000, GID: 100, GPUs: ptr("0,2"), Option: -1},
			want: wire.Request{V: 1, Kind: wire.JobStart, Event: &wire.Event{JobID: 8, UID: 1000, GID: 100, GPUs: "0,2", Persyst: "on", Time: now}},
		},
		{
			name: "site default off", kind: kindJobStart,
			ev:   event{JobID: 7, Option: -1},
			want: wire.Request{V: 1, Kind: wire.JobStart, Event: &wire.Event{JobID: 7, Persyst: "off", Time: now}},
		},
		{
			name: "user opted out", kind: kindJobStart, defaultOn: true,
			ev:   event{JobID: 7, Option: 0},
			want: wire.Request{V: 1, Kind: wire.JobStart, Event: &wire.Event{JobID: 7, Persyst: "off", Time: now}},
		},
		{
			name: "batch step start of an array task", kind: kindStepStart,
			ev: event{JobID: 12, StepID: 0xfffffffb, HasStep: true, ArrayJobID: 10, ArrayTaskID: 2, UID: 1, GID: 2, NodeID: 1, NNodes: 2,
				LocalTasks: 1, TotalTasks: 2, NCPUs: 4, JobMemMB: 1024, StepMemMB: 512, JobCores: ptr("0-3,8"), StepCores: ptr("0-1"), Option: 1},
			want: wire.Request{V: 1, Kind: wire.StepStart, Event: &wire.Event{JobID: 12, StepID: "batch", ArrayJobID: 10, ArrayTaskID: 2, UID: 1, GID: 2,
				NodeID: 1, NNodes: 2, LocalTasks: 1, TotalTasks: 2, NCPUs: 4, JobMemMB: 1024, StepMemMB: 512, JobCores: "0-3,8", StepCores: "0-1",
				Persyst: "on", Time: now}},
		},
		{
			name: "numbered step end with a failing status", kind: kindStepEnd,
			ev:   event{JobID: 12, StepID: 3, HasStep: true, Option: 1, HasExit: true, ExitStatus: 256, JobCores: ptr("")},
			want: wire.Request{V: 1, Kind: wire.StepEnd, Event: &wire.Event{JobID: 12, StepID: "3", Persyst: "on", ExitStatus: &status, Time: now}},
		},
		{
			name: "extern step end, status 0", kind: kindStepEnd,
			ev:   event{JobID: 12, StepID: 0xfffffffc, HasStep: true, Option: 1, HasExit: true},
			want: wire.Request{V: 1, Kind: wire.StepEnd, Event: &wire.Event{JobID: 12, StepID: "extern", Persyst: "on", ExitStatus: &zero, Time: now}},
		},
		{
			name: "interactive step", kind: kindStepStart,
			ev:   event{JobID: 12, StepID: 0xfffffffa, HasStep: true, Option: 1},
			want: wire.Request{V: 1, Kind: wire.StepStart, Event: &wire.Event{JobID: 12, StepID: "interactive", Persyst: "on", Time: now}},
		},
		{
			name: "job end with the largest ids", kind: kindJobEnd,
			ev:   event{JobID: 0xffffffef, UID: 0xfffffffe, GID: 0xfffffffe, JobMemMB: 1 << 62, Option: 1},
			want: wire.Request{V: 1, Kind: wire.JobEnd, Event: &wire.Event{JobID: 0xffffffef, UID: 0xfffffffe, GID: 0xfffffffe, JobMemMB: 1 << 62, Persyst: "on", Time: now}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line, ok := encode(tt.kind, tt.ev, tt.defaultOn, now)
			if !ok {
				t.Fatal("encode: does not fit")
			}
			if !strings.HasSuffix(line, "\n") || strings.Count(line, "\n") != 1 {
				t.Fatalf("not one line: %q", line)
			}
			got, err := wire.DecodeRequest([]byte(strings.TrimSuffix(line, "\n")))
			if err != nil {
				t.Fatalf("the daemon refuses %s: %v", line, err)
			}
			if diff := cmp.Diff(&tt.want, got); diff != "" {
				t.Errorf("decoded request (-want +got):\n%s", diff)
			}
		})
	}
}

// Strings from Slurm are escaped: whatever a core list holds, the request stays one valid
// JSON line, and the daemon's refusal names the field, not the syntax.
func FuzzEncodeCores(f *testing.F) {
	for _, s := range []string{"0-3", `"},"uid":0,"x":"`, "a\nb", "\\", "\x01\x7f\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cores string) {
		if strings.ContainsRune(cores, 0) {
			return
		}
		line, ok := encode(kindStepStart, event{JobID: 5, HasStep: true, StepID: 0, JobCores: &cores, Option: 1}, true, time.Now())
		if !ok {
			if len(cores) < 8<<10 {
				t.Fatalf("a %d-byte core list does not fit", len(cores))
			}
			return
		}
		body := strings.TrimSuffix(line, "\n")
		if strings.Contains(body, "\n") || !json.Valid([]byte(body)) {
			t.Fatalf("not one JSON line: %q", line)
		}
		r, err := wire.DecodeRequest([]byte(body))
		if err != nil && !strings.Contains(err.Error(), "job_cores") {
			t.Fatalf("refused for something other than the core list: %v", err)
		}
		if err == nil && r.Event.JobCores != cores {
			t.Fatalf("core list %q came out as %q", cores, r.Event.JobCores)
		}
		if err == nil && r.Event.UID != 0 {
			t.Fatalf("the core list set another field: %+v", r.Event)
		}
	})
}

func TestEncodeTooLong(t *testing.T) {
	huge := strings.Repeat("0,", 40<<10)
	if line, ok := encode(kindStepStart, event{JobID: 5, HasStep: true, JobCores: &huge}, true, time.Now()); ok {
		t.Errorf("a %d-byte request was encoded (limit %d)", len(line), wire.MaxMessage)
	}
}

func TestParseReply(t *testing.T) {
	tests := []struct {
		line    string
		want    reply
		wantWhy string
	}{
		{line: `{"v":1,"ok":true}`, want: reply{OK: true}},
		{line: `{"v":1,"ok":true,"cgroup":"/sys/fs/cgroup/perf_event/persyst/job_7"}`, want: reply{OK: true, Cgroup: "/sys/fs/cgroup/perf_event/persyst/job_7"}},
		{line: ` { "ok" : true , "cgroup" : "\/a\u002fb" } `, want: reply{OK: true, Cgroup: "/a/b"}},
		{line: `{"v":1,"ok":false,"error":"permission denied: \"x\"\n"}`, want: reply{Error: "permission denied: \"x\"\n"}},
		{line: `{"ok":true,"jobs":[{"a":[1,2,{"b":null}],"c":"}"}],"node":"n1","samples":{"x":-1.5e3}}`, want: reply{OK: true}},
		{line: `{"ok":true,"cgroup":"/caf\u00e9"}`, want: reply{OK: true, Error: "unusable cgroup path"}},
		{line: `{"ok":true,"cgroup":"/a` + strings.Repeat("b", 5000) + `"}`, want: reply{OK: true, Error: "unusable cgroup path"}},
		{line: `{"ok":true,"error":"` + strings.Repeat("e", 600) + `"}`, want: reply{OK: true, Error: strings.Repeat("e", 511)}},
		{line: `{}`, want: reply{}},
		{line: ``, wantWhy: "not a reply"},
		{line: `{"ok":true`, wantWhy: "not a reply"},
		{line: `{"ok":"true"}`, wantWhy: "not a reply"},
		{line: `{"ok":true}x`, wantWhy: "not a reply"},
		{line: `{"ok":true,}`, wantWhy: "not a reply"},
		{line: `{"cgroup":"a\qb"}`, wantWhy: "not a reply"},
		{line: `{"cgroup":"a` + "\x01" + `"}`, wantWhy: "not a reply"},
		{line: strings.Repeat("[", 100) + strings.Repeat("]", 100), wantWhy: "not a reply"},
		{line: `{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, wantWhy: "not a reply"},
	}
	for _, tt := range tests {
		got, why := parseReply(tt.line)
		if tt.wantWhy != "" {
			if !strings.Contains(why, tt.wantWhy) {
				t.Errorf("parseReply(%.60q): why %q, want %q", tt.line, why, tt.wantWhy)
			}
			continue
		}
		if why != "" {
			t.Errorf("parseReply(%.60q): %s", tt.line, why)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("parseReply(%.60q) (-want +got):\n%s", tt.line, diff)
		}
	}
}

// FuzzParseReply: every reply the daemon's JSON encoding can produce is read the way Go
// reads it.
func FuzzParseReply(f *testing.F) {
	for _, s := range []string{`{"v":1,"ok":true,"cgroup":"/a/b"}`, `{"ok":false,"error":"x"}`, `{"jobs":[1,{"a":"b"}],"ok":true}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if strings.ContainsAny(line, "\x00\n") {
			return
		}
		got, why := parseReply(line)
		var want wire.Reply
		if err := json.Unmarshal([]byte(line), &want); err != nil {
			return // the C reader may be more lenient; it never needs to be stricter
		}
		if !daemonSpelling(line) {
			return // Go matches keys in any case ("Ok"); the daemon writes only its own
		}
		if why != "" {
			// Only objects are replies; Go also accepts null.
			if strings.TrimSpace(line) != "null" {
				t.Fatalf("Go reads %q, C does not: %s", line, why)
			}
			return
		}
		if got.OK != want.OK {
			t.Fatalf("%q: ok %v, Go says %v", line, got.OK, want.OK)
		}
		if got.Cgroup != "" && got.Cgroup != want.Cgroup {
			t.Fatalf("%q: cgroup %q, Go says %q", line, got.Cgroup, want.Cgroup)
		}
	})
}

// daemon is a wire-protocol server on a socket in a temp dir: each connection is handed
// to serve. It records the requests read.
func daemon(t *testing.T, serve func(c net.Conn, r *bufio.Reader)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "persyst.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	return sock
}

func TestCall(t *testing.T) {
	msg, _ := encode(kindStepStart, event{JobID: 9, HasStep: true, StepID: 0xfffffffb, Option: 1}, true, time.Now())
	got := make(chan *wire.Request, 10)
	answer := func(rep *wire.Reply) func(net.Conn, *bufio.Reader) {
		return func(c net.Conn, r *bufio.Reader) {
			line, err := wire.ReadLine(r)
			if err != nil {
				t.Errorf("daemon: %v", err)
				return
			}
			req, err := wire.DecodeRequest(line)
			if err != nil {
				wire.WriteReply(c, &wire.Reply{V: 1, Error: err.Error()})
				return
			}
			got <- req
			wire.WriteReply(c, rep)
		}
	}

	t.Run("answered", func(t *testing.T) {
		sock := daemon(t, answer(&wire.Reply{V: 1, OK: true, Cgroup: "/sys/fs/cgroup/perf_event/persyst/job_9"}))
		rc, rep, why := call(sock, msg, time.Second)
		if rc != sent {
			t.Fatalf("call: %d %s", rc, why)
		}
		if want := (reply{OK: true, Cgroup: "/sys/fs/cgroup/perf_event/persyst/job_9"}); rep != want {
			t.Errorf("reply %+v, want %+v", rep, want)
		}
		if req := <-got; req.Kind != wire.StepStart || req.Event.JobID != 9 || req.Event.StepID != "batch" {
			t.Errorf("the daemon read %+v", req)
		}
	})
	t.Run("refused", func(t *testing.T) {
		sock := daemon(t, answer(&wire.Reply{V: 1, Error: "job 9: no such job"}))
		rc, _, why := call(sock, msg, time.Second)
		if rc != refused || !strings.Contains(why, "no such job") || !strings.Contains(why, sock) {
			t.Errorf("call = %d %q, want refused naming the socket and the daemon's reason", rc, why)
		}
		<-got
	})
	t.Run("refused before reading", func(t *testing.T) {
		// A daemon that refuses a peer answers and closes without reading the request.
		sock := daemon(t, func(c net.Conn, r *bufio.Reader) {
			wire.WriteReply(c, &wire.Reply{V: 1, Error: "permission denied: uid 1000"})
		})
		rc, _, why := call(sock, msg, time.Second)
		if rc != refused || !strings.Contains(why, "permission denied") {
			t.Errorf("call = %d %q, want refused with the daemon's reason", rc, why)
		}
	})
	t.Run("no answer", func(t *testing.T) {
		hold := make(chan struct{})
		defer close(hold)
		sock := daemon(t, func(c net.Conn, r *bufio.Reader) { <-hold })
		start := time.Now()
		rc, _, why := call(sock, msg, 150*time.Millisecond)
		took := time.Since(start)
		if rc != timedOut || !strings.Contains(why, "no answer") {
			t.Errorf("call = %d %q, want a timeout", rc, why)
		}
		if took < 150*time.Millisecond || took > 2*time.Second {
			t.Errorf("call returned after %v, want about 150ms", took)
		}
	})
	t.Run("closed without a reply", func(t *testing.T) {
		sock := daemon(t, func(c net.Conn, r *bufio.Reader) { wire.ReadLine(r) })
		rc, _, why := call(sock, msg, time.Second)
		if rc != failed || !strings.Contains(why, "without a reply") {
			t.Errorf("call = %d %q", rc, why)
		}
	})
	t.Run("reply cut short", func(t *testing.T) {
		sock := daemon(t, func(c net.Conn, r *bufio.Reader) { wire.ReadLine(r); c.Write([]byte(`{"ok":tr`)) })
		rc, _, why := call(sock, msg, time.Second)
		if rc != failed || !strings.Contains(why, "cut short") {
			t.Errorf("call = %d %q", rc, why)
		}
	})
	t.Run("endless reply", func(t *testing.T) {
		sock := daemon(t, func(c net.Conn, r *bufio.Reader) {
			wire.ReadLine(r)
			c.Write([]byte(strings.Repeat("x", 200<<10)))
		})
		rc, _, why := call(sock, msg, time.Second)
		if rc != failed || !strings.Contains(why, "longer than") {
			t.Errorf("call = %d %q", rc, why)
		}
	})
	t.Run("no daemon", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "none.sock")
		rc, _, why := call(sock, msg, time.Second)
		if rc != failed || !strings.Contains(why, sock) {
			t.Errorf("call = %d %q, want a failure naming the socket", rc, why)
		}
	})
	t.Run("socket path too long", func(t *testing.T) {
		rc, _, why := call("/"+strings.Repeat("x", 200), msg, time.Second)
		if rc != failed || !strings.Contains(why, "too long") {
			t.Errorf("call = %d %q", rc, why)
		}
	})
}

// Delivering does not wait for the daemon: it returns while the daemon has not read.
func TestDeliver(t *testing.T) {
	msg, _ := encode(kindJobEnd, event{JobID: 9, Option: 1}, true, time.Now())
	hold := make(chan struct{})
	read := make(chan string, 1)
	sock := daemon(t, func(c net.Conn, r *bufio.Reader) {
		<-hold
		line, err := wire.ReadLine(r)
		if err != nil {
			read <- err.Error()
			return
		}
		read <- string(line)
	})
	start := time.Now()
	if rc, why := deliver(sock, msg, 5*time.Second); rc != sent {
		t.Fatalf("deliver: %d %s", rc, why)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("deliver took %v with the daemon not reading", took)
	}
	close(hold)
	if got := <-read; got+"\n" != msg {
		t.Errorf("the daemon read %q, want %q", got, msg)
	}
	if rc, why := deliver(filepath.Join(t.TempDir(), "none.sock"), msg, time.Second); rc != failed || why == "" {
		t.Errorf("deliver to no daemon = %d %q, want a failure", rc, why)
	}
}

// The plugin holds no descriptor after an exchange, whatever its outcome.
func TestNoDescriptorLeft(t *testing.T) {
	msg, _ := encode(kindJobStart, event{JobID: 9, Option: 1}, true, time.Now())
	sock := daemon(t, func(c net.Conn, r *bufio.Reader) { wire.ReadLine(r); wire.WriteReply(c, &wire.Reply{V: 1, OK: true}) })
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(ents)
	}
	call(sock, msg, time.Second) // warm up whatever the runtime opens once
	before := fds()
	for i := 0; i < 50; i++ {
		call(sock, msg, time.Second)
		deliver(sock, msg, time.Second)
		call(filepath.Join(t.TempDir(), "none.sock"), msg, time.Second)
	}
	time.Sleep(50 * time.Millisecond) // the test daemon closes its ends
	if after := fds(); after > before+2 {
		t.Errorf("descriptors: %d before, %d after 150 exchanges", before, after)
	}
}

// daemonSpelling says whether every top-level key of the JSON object line that names a
// field of wire.Reply in some case is spelled as the daemon writes it (its json tag):
// encoding/json matches keys case-insensitively, the plugin's reader exactly.
func daemonSpelling(line string) bool {
	var keys map[string]json.RawMessage
	if json.Unmarshal([]byte(line), &keys) != nil {
		return true
	}
	rt := reflect.TypeOf(wire.Reply{})
	for k := range keys {
		for i := range rt.NumField() {
			tag, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if strings.EqualFold(k, tag) && k != tag {
				return false
			}
		}
	}
	return true
}

// TestMarkUnreachableOnce: of the processes that find the daemon unreachable at the same
// moment (the prolog and a slurmstepd), one logs it: the first to mark it, under the
// marker's lock; a stale marker is a new failure, and a link planted in its place is
// never followed.
func TestMarkUnreachableOnce(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "persyst.sock.unreachable")
	var wg sync.WaitGroup
	var firsts atomic.Int32
	for i := range 16 {
		wg.Go(func() {
			if markUnreachable(marker, fmt.Sprintf("event %d", i)) {
				firsts.Add(1)
			}
		})
	}
	wg.Wait()
	if n := firsts.Load(); n != 1 {
		t.Errorf("%d of 16 callers at once were first to mark the daemon unreachable, want 1", n)
	}
	if b, err := os.ReadFile(marker); err != nil || !strings.HasPrefix(string(b), "event ") {
		t.Errorf("marker holds %q (%v), want an event's note", b, err)
	}
	if markUnreachable(marker, "later") {
		t.Error("a fresh marker: first again")
	}
	old := time.Now().Add(-11 * time.Minute)
	if err := os.Chtimes(marker, old, old); err != nil {
		t.Fatal(err)
	}
	if !markUnreachable(marker, "after ten minutes") {
		t.Error("a stale marker: not first")
	}
	// Another process marking now (holding the lock) is the one to log.
	f, err := os.Open(marker)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(marker, old, old)
	if markUnreachable(marker, "while locked") {
		t.Error("marker locked by another: first")
	}
	f.Close()
	// A link in the marker's place is not followed; the failure is logged all the same.
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "linked.unreachable")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if !markUnreachable(link, "through a link") {
		t.Error("a link in the marker's place: not first (the failure would not be logged)")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep\n" {
		t.Errorf("the link's target was written: %q", b)
	}
}
