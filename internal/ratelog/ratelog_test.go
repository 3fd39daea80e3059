package ratelog

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestBounded: 100 s of a flood, 1,000 occurrences a second, write one line in 10 s,
// and the lines count every occurrence.
func TestBounded(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	l := New(zerolog.New(&buf), 10*time.Second, func() time.Time { return now })
	for i := range 100_000 {
		if i%1000 == 0 {
			now = now.Add(time.Second)
		}
		l.Warn().Str("why", "garbage").Msg("refused")
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) < 9 || len(lines) > 11 {
		t.Fatalf("%d lines for 100 s of flood, want one in 10 s", len(lines))
	}
	sum := 0
	for _, line := range lines {
		var v struct {
			N int `json:"since_last_line"`
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatal(err)
		}
		sum += v.N
	}
	// The occurrences after the last line are counted in the next one, not yet written.
	if sum > 100_000 || sum < 90_000 {
		t.Errorf("the lines count %d occurrences, want most of 100,000", sum)
	}
}
