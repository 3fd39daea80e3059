package tick

import (
	"context"
	"testing"
	"time"
)

func TestUntilStopsWhenDone(t *testing.T) {
	calls := 0
	Until(context.Background(), time.Millisecond, func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Errorf("calls = %d, want 3 (f said done at the third)", calls)
	}
}

func TestEveryStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	Every(ctx, time.Millisecond, func() {
		calls++
		if calls == 2 {
			cancel()
		}
	})
	if calls != 2 {
		t.Errorf("calls = %d, want 2 (the context ended after the second)", calls)
	}
}

func TestNoCallAfterCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	Every(ctx, time.Millisecond, func() { t.Error("f called after the context was done") })
}
