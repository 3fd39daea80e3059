package properties

import "testing"

func TestSanitize(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"cpu_user_seconds", "cpu_user_seconds"},
		{"task-clock", "task_clock"},
		{"syscalls:sys_enter_openat", "syscalls_sys_enter_openat"},
		{"L1-dcache-load-misses", "L1_dcache_load_misses"},
		{"é", "__"},
	} {
		if got := Sanitize(tt.in); got != tt.want {
			t.Errorf("Sanitize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = Sanitize("cpu_user_seconds") }); n != 0 {
		t.Errorf("a clean name: %v allocations, want none", n)
	}
}
