//go:build vmnode

package vmnode

import (
	"strings"
	"testing"
)

// testTargets: where fentry programs count the calls (this node, unlike the host of the
// other tests), small pieces written to a pipe and small pieces read from a file are
// told apart, each with its own finding and advice, and the digest says how the calls
// were classified.
func testTargets(t *testing.T) {
	const told = "told apart per call by what they went to"
	// The writer's 64-byte pieces wake cat each time; cat reads what has piled up.
	id := sbatch(t, "--wrap", workload+" write -file /dev/stdout -bytes 8388608 -size 64 -min-seconds 6 | cat >/dev/null")
	waitDone(t, id)
	r, text := digestOf(t, id)
	flat := strings.Join(strings.Fields(text), " ") // as read, whatever the wrapping
	if !hasFinding(r, "pipe_write_request_size") || hasFinding(r, "io_write_request_size") ||
		!strings.Contains(flat, "Small writes to pipes") || !strings.Contains(flat, "buffer the output") || !strings.Contains(flat, told) {
		t.Errorf("job %d (64-byte writes into a pipe): findings %v, want pipe_write_request_size and no file's; its output:\n%s", id, keys(r), text)
	}
	id = sbatch(t, "--wrap", workload+" read -file "+home+"/small.dat -bytes 8388608 -size 64 -min-seconds 6")
	waitDone(t, id)
	r, text = digestOf(t, id)
	flat = strings.Join(strings.Fields(text), " ")
	if !hasFinding(r, "io_read_request_size") || hasFinding(r, "pipe_read_request_size") ||
		!strings.Contains(flat, "Data was read in small pieces: read larger blocks") ||
		strings.Contains(flat, "from pipes") || !strings.Contains(flat, told) {
		t.Errorf("job %d (64-byte reads from a file): findings %v, want io_read_request_size and no pipe's; its output:\n%s", id, keys(r), text)
	}
}
