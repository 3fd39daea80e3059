package wire_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/persyst/persyst/daemon/wire"
)

// FuzzDecodeRequest: DecodeRequest never panics, and whatever it accepts stays valid and
// unchanged after a JSON round trip (what the daemon logs or forwards is what it checked).
func FuzzDecodeRequest(f *testing.F) {
	for _, k := range []wire.Kind{wire.JobStart, wire.StepStart, wire.StepEnd, wire.JobEnd} {
		f.Add(marshal(f, request(k, nil)))
	}
	for _, s := range []string{
		`{"v":1,"kind":"list"}`,
		`{"v":1,"kind":"list"}}`,
		`{"v":2,"kind":"list"}`,
		`{"v":1,"kind":"job_start","event":{"job_id":1,"uid":0,"gid":0,"persyst":"on","time":"2024-01-01T00:00:00+01:00"}}`,
		`{"v":1,"kind":"step_end","event":{"job_id":1,"step_id":"0+1","uid":0,"gid":0,"persyst":"off","exit_status":9,"time":"2024-01-01T00:00:00Z"}}`,
		`{"v":1,"kind":"step_start","event":{"job_id":7,"step_id":"batch","job_cores":"0-3,8","step_cores":"1-","persyst":"on","time":"2024-01-01T00:00:00Z"}}`,
		`{"v":1,"kind":"job_start","event":{"job_id":7,"cgroups":{"freezer":"/a/../b"},"persyst":"on","time":"2024-01-01T00:00:00Z"}}`,
		`{"v":1,"kind":"job_start","event":{"job_id":7,"cgroups":{},"persyst":"on","time":"2024-01-01T00:00:00Z"}}`,
		`{"v":1,"kind":"job_start","event":{"job_id":0,"persyst":"on","time":"2024-01-01T00:00:00Z"}}`,
		`{"V":1,"KIND":"list"}`,
		`[[[[[[[[[[`,
		`not json`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		req, err := wire.DecodeRequest(line)
		if err != nil {
			if req != nil {
				t.Fatalf("DecodeRequest returned a request with error %v", err)
			}
			return
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("accepted request does not validate: %v", err)
		}
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("accepted request cannot be marshalled: %v", err)
		}
		again, err := wire.DecodeRequest(b)
		if err != nil {
			t.Fatalf("accepted request %q fails after a JSON round trip (%s): %v", line, b, err)
		}
		if diff := cmp.Diff(req, again, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("round trip mismatch (-want +got):\n%s", diff)
		}
	})
}
