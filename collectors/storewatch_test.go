package collectors

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// flaky is a store whose database answers as its script says, one answer per Ping (a
// fake: the real outage, a MariaDB stopped for a minute, is the integration tests').
type flaky struct {
	mu      sync.Mutex
	pending error
	answers []error
	pings   int
}

func (f *flaky) Pending() error { f.mu.Lock(); defer f.mu.Unlock(); return f.pending }

func (f *flaky) Ping(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pings++
	err := f.answers[0]
	if len(f.answers) > 1 { // the last answer stays
		f.answers = f.answers[1:]
	}
	return err
}

// TestWatchStore: the log says once that the store does not answer and once that it
// answers again, however many checks fail between; the metric follows every change.
func TestWatchStore(t *testing.T) {
	down := errors.New("dial unix /run/mysqld/mysqld.sock: connect: no such file or directory")
	for _, tc := range []struct {
		name    string
		pending error
		answers []error
		want    []string // the log's messages, in order
		ups     []bool
	}{
		{"opened at start, an outage", nil, []error{nil, down, down, down, nil, nil},
			[]string{"the site's store does not answer", "the site's store answers"}, []bool{true, false, true}},
		{"not opened at start", down, []error{down, down, nil, nil},
			[]string{"the site's store cannot be opened", "the site's store answers"}, []bool{false, true}},
		{"never answers", down, []error{down, down, down, down},
			[]string{"the site's store cannot be opened"}, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &flaky{pending: tc.pending, answers: tc.answers}
			var buf bytes.Buffer
			var mu sync.Mutex
			var ups []bool
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				watchStore(ctx, st, "mysql://persyst@db1:3306/persyst", time.Millisecond, func(up bool) {
					mu.Lock()
					ups = append(ups, up)
					mu.Unlock()
				}, zerolog.New(&buf))
				close(done)
			}()
			for {
				st.mu.Lock()
				n := st.pings
				st.mu.Unlock()
				if n > len(tc.answers)+3 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			cancel()
			<-done
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				for _, w := range tc.want {
					if strings.Contains(l, w) {
						got = append(got, w)
					}
				}
				if !strings.Contains(l, "mysql://persyst@db1:3306/persyst") {
					t.Errorf("a line without the store's name: %s", l)
				}
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("logged %q, want %q:\n%s", got, tc.want, buf.String())
			}
			// The metric: set at start, then at each change.
			var changes []bool
			for i, u := range ups {
				if i == 0 || u != ups[i-1] {
					changes = append(changes, u)
				}
			}
			if len(changes) != len(tc.ups) || len(ups) != len(changes) {
				t.Errorf("up %v, want %v (once per change)", ups, tc.ups)
			}
			for i := range changes {
				if i < len(tc.ups) && changes[i] != tc.ups[i] {
					t.Errorf("up %v, want %v", ups, tc.ups)
				}
			}
		})
	}
}
