package wire_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/persyst/persyst/daemon/wire"
)

var t0 = time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)

func intp(i int) *int { return &i }

// event returns a fully filled, valid event for kind k.
func event(k wire.Kind) *wire.Event {
	e := &wire.Event{
		JobID:       42,
		ArrayJobID:  40,
		ArrayTaskID: 2,
		UID:         1000,
		GID:         1000,
		User:        "alice",
		Node:        "node1",
		NodeID:      1,
		NNodes:      2,
		LocalTasks:  4,
		TotalTasks:  8,
		NCPUs:       4,
		JobCores:    "0-3",
		JobMemMB:    4096,
		Cgroups: map[string]string{
			"freezer":     "/sys/fs/cgroup/freezer/slurm/uid_1000/job_42",
			"cpu,cpuacct": "/sys/fs/cgroup/cpu,cpuacct/slurm/uid_1000/job_42",
			"unified":     "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42",
		},
		Persyst: wire.On,
		Time:    t0,
	}
	switch k {
	case wire.StepStart:
		e.StepID = "batch"
		e.StepCores = "0-1"
		e.StepMemMB = 1024
	case wire.StepEnd:
		e.StepID = "0"
		e.ExitStatus = intp(768)
	case wire.JobEnd:
		e.ExitStatus = intp(0)
	}
	return e
}

func request(k wire.Kind, mod func(e *wire.Event)) *wire.Request {
	e := event(k)
	if mod != nil {
		mod(e)
	}
	return &wire.Request{V: wire.Version, Kind: k, Event: e}
}

func marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return b
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name string
		req  *wire.Request
	}{
		{"list", &wire.Request{V: wire.Version, Kind: wire.List}},
		{"job_start", request(wire.JobStart, nil)},
		{"job_start minimal", &wire.Request{V: wire.Version, Kind: wire.JobStart, Event: &wire.Event{JobID: 1, Persyst: wire.Off, Time: t0}}},
		{"step_start batch", request(wire.StepStart, nil)},
		{"step_start extern", request(wire.StepStart, func(e *wire.Event) { e.StepID = "extern" })},
		{"step_start interactive", request(wire.StepStart, func(e *wire.Event) { e.StepID = "interactive" })},
		{"step_start number", request(wire.StepStart, func(e *wire.Event) { e.StepID = "4294967" })},
		{"step_start het component", request(wire.StepStart, func(e *wire.Event) { e.StepID = "3+1" })},
		{"step_end", request(wire.StepEnd, nil)},
		{"step_end without exit status", request(wire.StepEnd, func(e *wire.Event) { e.ExitStatus = nil })},
		{"job_end", request(wire.JobEnd, nil)},
		{"largest job id", request(wire.JobStart, func(e *wire.Event) { e.JobID = 0xffffffef })},
		{"empty node and user", request(wire.JobStart, func(e *wire.Event) { e.Node, e.User = "", "" })},
		{"user with dollar (machine account)", request(wire.JobStart, func(e *wire.Event) { e.User = "host$" })},
		{"user with @", request(wire.JobStart, func(e *wire.Event) { e.User = "bob@EXAMPLE.ORG" })},
		{"nnodes 0 ignores node_id", request(wire.JobStart, func(e *wire.Event) { e.NodeID, e.NNodes = 7, 0 })},
		{"last node", request(wire.JobStart, func(e *wire.Event) { e.NodeID, e.NNodes = 1, 2 })},
		{"32 cgroups", request(wire.JobStart, func(e *wire.Event) { e.Cgroups = cgroups(32) })},
		{"root cgroup path", request(wire.JobStart, func(e *wire.Event) { e.Cgroups = map[string]string{"unified": "/"} })},
		{"persyst off", request(wire.StepStart, func(e *wire.Event) { e.Persyst = wire.Off })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.req.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			line := marshal(t, tc.req)
			got, err := wire.DecodeRequest(line)
			if err != nil {
				t.Fatalf("DecodeRequest(%s): %v", line, err)
			}
			if diff := cmp.Diff(tc.req, got); diff != "" {
				t.Errorf("DecodeRequest round trip mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func cgroups(n int) map[string]string {
	m := map[string]string{}
	for i := 0; i < n; i++ {
		m[fmt.Sprintf("c%d", i)] = fmt.Sprintf("/sys/fs/cgroup/c%d/job_42", i)
	}
	return m
}

// TestValidateRejects checks hostile or broken requests; every error must name the field.
func TestValidateRejects(t *testing.T) {
	tests := []struct {
		name string
		req  *wire.Request
		want []string // substrings of the error
	}{
		{"version 0", &wire.Request{Kind: wire.List}, []string{"version 0", "speaks 1"}},
		{"version 2", &wire.Request{V: 2, Kind: wire.JobStart, Event: event(wire.JobStart)}, []string{"version 2", "speaks 1"}},
		{"missing kind", &wire.Request{V: 1, Event: event(wire.JobStart)}, []string{"field kind", "missing"}},
		{"unknown kind", &wire.Request{V: 1, Kind: "job_suspend", Event: event(wire.JobStart)}, []string{"field kind", `"job_suspend"`}},
		{"list with event", &wire.Request{V: 1, Kind: wire.List, Event: event(wire.JobStart)}, []string{"list", "event"}},
		{"missing event", &wire.Request{V: 1, Kind: wire.JobStart}, []string{"job_start", "field event", "missing"}},
		{"missing event step_end", &wire.Request{V: 1, Kind: wire.StepEnd}, []string{"step_end", "field event"}},
		{"job id 0", request(wire.JobStart, func(e *wire.Event) { e.JobID = 0 }), []string{"field job_id", "0 is not a job id"}},
		{"job id 0xfffffffb", request(wire.JobStart, func(e *wire.Event) { e.JobID = 0xfffffffb }), []string{"field job_id", "4294967291"}},
		{"job id 0xfffffff0", request(wire.JobEnd, func(e *wire.Event) { e.JobID = 0xfffffff0 }), []string{"field job_id"}},
		{"job id max", request(wire.StepStart, func(e *wire.Event) { e.JobID = 0xffffffff }), []string{"field job_id"}},
		{"empty step id", request(wire.StepStart, func(e *wire.Event) { e.StepID = "" }), []string{"step_start", "field step_id", `""`}},
		{"step id injection", request(wire.StepStart, func(e *wire.Event) { e.StepID = "batch;rm" }), []string{"field step_id", `"batch;rm"`}},
		{"negative step id", request(wire.StepEnd, func(e *wire.Event) { e.StepID = "-1" }), []string{"step_end", "field step_id", `"-1"`}},
		{"step id too long", request(wire.StepEnd, func(e *wire.Event) { e.StepID = "99999999999" }), []string{"field step_id", `"99999999999"`}},
		{"step id path", request(wire.StepStart, func(e *wire.Event) { e.StepID = "../0" }), []string{"field step_id"}},
		{"step id upper case", request(wire.StepStart, func(e *wire.Event) { e.StepID = "BATCH" }), []string{"field step_id"}},
		{"step id newline", request(wire.StepStart, func(e *wire.Event) { e.StepID = "batch\n" }), []string{"field step_id"}},
		{"step id on job_start", request(wire.JobStart, func(e *wire.Event) { e.StepID = "batch" }), []string{"job_start", "field step_id", "must be empty"}},
		{"step id on job_end", request(wire.JobEnd, func(e *wire.Event) { e.StepID = "0" }), []string{"job_end", "field step_id", "must be empty for job_end"}},
		{"node with slash", request(wire.JobStart, func(e *wire.Event) { e.Node = "../etc" }), []string{"field node", `"../etc"`}},
		{"node with space", request(wire.JobStart, func(e *wire.Event) { e.Node = "node 1" }), []string{"field node"}},
		{"node too long", request(wire.JobStart, func(e *wire.Event) { e.Node = strings.Repeat("n", 65) }), []string{"field node"}},
		{"node leading dash", request(wire.JobStart, func(e *wire.Event) { e.Node = "-node" }), []string{"field node"}},
		{"user with slash", request(wire.JobStart, func(e *wire.Event) { e.User = "a/b" }), []string{"field user", `"a/b"`}},
		{"user leading dash", request(wire.JobStart, func(e *wire.Event) { e.User = "-rf" }), []string{"field user"}},
		{"user with newline", request(wire.JobStart, func(e *wire.Event) { e.User = "alice\nroot" }), []string{"field user"}},
		{"user too long", request(wire.JobStart, func(e *wire.Event) { e.User = strings.Repeat("u", 66) }), []string{"field user"}},
		{"persyst empty", request(wire.JobStart, func(e *wire.Event) { e.Persyst = "" }), []string{"field persyst", `""`}},
		{"persyst ON", request(wire.JobStart, func(e *wire.Event) { e.Persyst = "ON" }), []string{"field persyst", `"ON"`}},
		{"persyst yes", request(wire.StepStart, func(e *wire.Event) { e.Persyst = "yes" }), []string{"field persyst", `"yes"`}},
		{"node id equals nnodes", request(wire.JobStart, func(e *wire.Event) { e.NodeID, e.NNodes = 2, 2 }), []string{"field node_id", "2 not below nnodes 2"}},
		{"node id above nnodes", request(wire.JobStart, func(e *wire.Event) { e.NodeID, e.NNodes = 9, 1 }), []string{"field node_id"}},
		{"job cores backwards", request(wire.JobStart, func(e *wire.Event) { e.JobCores = "3-1" }), []string{"field job_cores", "backwards"}},
		{"job cores letters", request(wire.JobStart, func(e *wire.Event) { e.JobCores = "a" }), []string{"field job_cores"}},
		{"job cores huge", request(wire.JobStart, func(e *wire.Event) { e.JobCores = "0-1000000" }), []string{"field job_cores"}},
		{"step cores open range", request(wire.StepStart, func(e *wire.Event) { e.StepCores = "1-" }), []string{"field step_cores"}},
		{"step cores comma", request(wire.StepStart, func(e *wire.Event) { e.StepCores = "," }), []string{"field step_cores"}},
		{"33 cgroups", request(wire.JobStart, func(e *wire.Event) { e.Cgroups = cgroups(33) }), []string{"field cgroups", "33 entries"}},
		{"relative cgroup", request(wire.JobStart, func(e *wire.Event) { e.Cgroups = map[string]string{"freezer": "slurm/job_42"} }), []string{"field cgroups[freezer]", `"slurm/job_42"`}},
		{"empty cgroup path", request(wire.JobStart, func(e *wire.Event) { e.Cgroups = map[string]string{"freezer": ""} }), []string{"field cgroups[freezer]"}},
		{"cgroup dotdot", request(wire.JobStart, func(e *wire.Event) {
			e.Cgroups = map[string]string{"freezer": "/sys/fs/cgroup/freezer/../../../etc"}
		}), []string{"field cgroups[freezer]", "not a clean absolute path"}},
		{"cgroup trailing dotdot", request(wire.JobStart, func(e *wire.Event) { e.Cgroups = map[string]string{"unified": "/sys/fs/cgroup/.."} }), []string{"field cgroups[unified]"}},
		{"cgroup NUL", request(wire.JobStart, func(e *wire.Event) { e.Cgroups = map[string]string{"unified": "/sys/fs/cgroup\x00/x"} }), []string{"field cgroups[unified]"}},
		{"cgroup bad controller", request(wire.JobStart, func(e *wire.Event) { e.Cgroups = map[string]string{"../x": "/sys"} }), []string{"field cgroups", `"../x"`}},
		{"cgroup empty controller", request(wire.JobStart, func(e *wire.Event) { e.Cgroups = map[string]string{"": "/sys"} }), []string{"field cgroups", "controller"}},
		{"exit status on job_start", request(wire.JobStart, func(e *wire.Event) { e.ExitStatus = intp(0) }), []string{"job_start", "field exit_status"}},
		{"exit status on step_start", request(wire.StepStart, func(e *wire.Event) { e.ExitStatus = intp(256) }), []string{"step_start", "field exit_status"}},
		{"zero time", request(wire.JobStart, func(e *wire.Event) { e.Time = time.Time{} }), []string{"field time", "missing"}},
		{"zero time step_end", request(wire.StepEnd, func(e *wire.Event) { e.Time = time.Time{} }), []string{"step_end", "field time"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.Validate()
			if err == nil {
				t.Fatalf("Validate(%+v) = nil, want an error containing %q", tc.req, tc.want)
			}
			checkContains(t, err, tc.want)
			// The same request sent on the wire must be refused the same way.
			_, derr := wire.DecodeRequest(marshal(t, tc.req))
			if derr == nil {
				t.Fatalf("DecodeRequest accepted what Validate refused (%v)", err)
			}
			if diff := cmp.Diff(err.Error(), derr.Error()); diff != "" {
				t.Errorf("DecodeRequest vs Validate error mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func checkContains(t *testing.T, err error, want []string) {
	t.Helper()
	var missing []string
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			missing = append(missing, w)
		}
	}
	if diff := cmp.Diff([]string(nil), missing); diff != "" {
		t.Errorf("error %q lacks substrings (-want +got):\n%s", err, diff)
	}
}

// TestDecodeRequestRaw covers what only exists as bytes on the wire.
func TestDecodeRequestRaw(t *testing.T) {
	valid := string(marshal(t, request(wire.StepStart, nil)))
	tests := []struct {
		name string
		line string
		want []string // nil: accepted
	}{
		{"valid", valid, nil},
		{"valid list", `{"v":1,"kind":"list"}`, nil},
		{"trailing spaces", `{"v":1,"kind":"list"}   `, nil},
		{"leading spaces", `  {"v":1,"kind":"list"}`, nil},
		{"unknown top field", `{"v":1,"kind":"list","admin":true}`, []string{"decode request", `unknown field "admin"`}},
		{"unknown event field", strings.Replace(valid, `"job_id"`, `"evil":1,"job_id"`, 1), []string{"decode request", `unknown field "evil"`}},
		{"trailing object", `{"v":1,"kind":"list"}{"v":1,"kind":"list"}`, []string{"trailing data"}},
		{"trailing word", `{"v":1,"kind":"list"} rm -rf`, []string{"trailing data"}},
		{"trailing number", `{"v":1,"kind":"list"}1`, []string{"trailing data"}},
		// A stray closing bracket is trailing data as much as anything else.
		{"trailing brace", `{"v":1,"kind":"list"}}`, []string{"trailing data"}},
		{"trailing bracket", `{"v":1,"kind":"list"}]`, []string{"trailing data"}},
		{"empty line", ``, []string{"decode request"}},
		{"not json", `hello daemon`, []string{"decode request"}},
		{"json array", `[{"v":1,"kind":"list"}]`, []string{"decode request"}},
		{"json string", `"list"`, []string{"decode request"}},
		{"json null", `null`, []string{"version 0"}},
		{"truncated", valid[:len(valid)/2], []string{"decode request"}},
		{"wrong type v", `{"v":"1","kind":"list"}`, []string{"decode request"}},
		{"wrong type job_id", strings.Replace(valid, `"job_id":42`, `"job_id":-42`, 1), []string{"decode request"}},
		{"job_id overflow", strings.Replace(valid, `"job_id":42`, `"job_id":4294967296`, 1), []string{"decode request"}},
		{"float job_id", strings.Replace(valid, `"job_id":42`, `"job_id":4.2`, 1), []string{"decode request"}},
		{"bad time", strings.Replace(valid, `"time":"2024-06-01T12:00:00Z"`, `"time":"yesterday"`, 1), []string{"decode request"}},
		{"zero time on wire", strings.Replace(valid, `"time":"2024-06-01T12:00:00Z"`, `"time":"0001-01-01T00:00:00Z"`, 1), []string{"field time"}},
		{"null event", `{"v":1,"kind":"job_start","event":null}`, []string{"field event"}},
		{"version 2 on wire", `{"v":2,"kind":"list"}`, []string{"version 2"}},
		{"deeply nested", `{"v":1,"kind":"job_start","event":{"cgroups":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}}`, []string{"decode request"}},
		{"deeply nested unknown field", `{"v":1,"x":` + strings.Repeat(`{"a":`, 20000) + `1` + strings.Repeat(`}`, 20000) + `}`, []string{"decode request"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := wire.DecodeRequest([]byte(tc.line))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("DecodeRequest: %v", err)
				}
				if got == nil {
					t.Fatal("DecodeRequest returned nil request and nil error")
				}
				return
			}
			if err == nil {
				t.Fatalf("DecodeRequest(%.200q) = %+v, want an error containing %q", tc.line, got, tc.want)
			}
			if got != nil {
				t.Errorf("DecodeRequest returned a request along with error %v", err)
			}
			checkContains(t, err, tc.want)
		})
	}
}

func TestReadLine(t *testing.T) {
	long := strings.Repeat("x", wire.MaxMessage)
	tests := []struct {
		name    string
		in      string
		want    []string // successive lines
		wantErr string   // error of the read after them
	}{
		{"one line", "hello\n", []string{"hello"}, "EOF"},
		// A line cut short (EOF or timeout before the newline) is never a message.
		{"no newline at EOF", "hello", nil, "cut short after 5 bytes"},
		{"second line cut short", "a\nb", []string{"a"}, "cut short after 1 bytes"},
		{"two lines", "a\nb\n", []string{"a", "b"}, "EOF"},
		{"crlf", "a\r\n", []string{"a"}, "EOF"},
		{"empty input", "", nil, "EOF"},
		{"exactly MaxMessage", long + "\nnext\n", []string{long, "next"}, "EOF"},
		{"MaxMessage+1", long + "y\n", nil, fmt.Sprintf("longer than %d bytes", wire.MaxMessage)},
		{"far too long", strings.Repeat("z", 4*wire.MaxMessage) + "\n", nil, "longer than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := bufio.NewReader(strings.NewReader(tc.in))
			var got []string
			var err error
			for {
				var b []byte
				b, err = wire.ReadLine(r)
				if err != nil {
					break
				}
				got = append(got, string(b))
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("lines mismatch (-want +got):\n%s", diff)
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("final error = %v, want one containing %q", err, tc.wantErr)
			}
			if tc.wantErr == "EOF" && !errors.Is(err, io.EOF) {
				t.Errorf("final error = %v, want io.EOF", err)
			}
		})
	}
}

func TestWriteMessage(t *testing.T) {
	tests := []struct {
		name    string
		v       any
		want    string
		wantErr string
	}{
		{"reply", &wire.Reply{V: 1, OK: true, Node: "n1"}, `{"v":1,"ok":true,"node":"n1"}` + "\n", ""},
		{"error reply", &wire.Reply{V: 1, Error: "no"}, `{"v":1,"ok":false,"error":"no"}` + "\n", ""},
		{"too long", &wire.Reply{V: 1, Error: strings.Repeat("e", wire.MaxMessage)}, "", "longer than"},
		{"unmarshalable", func() {}, "", "unsupported type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			err := wire.WriteMessage(&b, tc.v)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("WriteMessage = nil, want error containing %q", tc.wantErr)
				}
				checkContains(t, err, []string{tc.wantErr})
				if b.Len() != 0 {
					t.Errorf("WriteMessage wrote %d bytes despite the error", b.Len())
				}
				return
			}
			if err != nil {
				t.Fatalf("WriteMessage: %v", err)
			}
			if diff := cmp.Diff(tc.want, b.String()); diff != "" {
				t.Errorf("WriteMessage mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
