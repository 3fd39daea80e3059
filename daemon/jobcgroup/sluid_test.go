package jobcgroup

import "testing"

func TestIsSLUID(t *testing.T) {
	for name, want := range map[string]bool{
		"sEKNKTV3WPV500": true, // cgroup.conf(5)'s example
		"s0ABCDEFGHJKMN": true,
		"job_12":         false,
		"sEKNKTV3WPV50":  false, // 12 characters
		"SEKNKTV3WPV500": false, // the prefix is lowercase
		"sEKNKTV3WPV50U": false, // U is not Crockford's
		"step_batch":     false,
	} {
		if got := IsSLUID(name); got != want {
			t.Errorf("IsSLUID(%q) = %v, want %v", name, got, want)
		}
	}
}
