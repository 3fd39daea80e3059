package kmsg

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParseOOM: the kernel's OOM kill records (recorded on this machine's 6.18 kernel,
// a Slurm job on cgroup v1, and a v2 layout), and records that are not kills.
func TestParseOOM(t *testing.T) {
	tests := []struct {
		name   string
		record string
		want   OOMKill
		ok     bool
	}{
		{"slurm job, cgroup v1",
			"3,1021,17749083585,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=step_batch,mems_allowed=0,oom_memcg=/slurm_node1/uid_65534/job_2,task_memcg=/slurm_node1/uid_65534/job_2/step_batch/task_0,task=persyst-workloa,pid=17450,uid=65534\n",
			OOMKill{TaskCgroup: "/slurm_node1/uid_65534/job_2/step_batch/task_0", OOMCgroup: "/slurm_node1/uid_65534/job_2", PID: 17450, Task: "persyst-workloa"}, true},
		{"cgroup v2, continuation lines",
			"6,900,5,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/system.slice/slurmstepd.scope/job_7,task_memcg=/system.slice/slurmstepd.scope/job_7/step_0/user/task_0,task=a.out,pid=42,uid=1000\n SUBSYSTEM=x\n",
			OOMKill{TaskCgroup: "/system.slice/slurmstepd.scope/job_7/step_0/user/task_0", OOMCgroup: "/system.slice/slurmstepd.scope/job_7", PID: 42, Task: "a.out"}, true},
		{"the kill's second line", "3,1022,17749083613,-;Memory cgroup out of memory: Killed process 17450 (persyst-workloa)\n", OOMKill{}, false},
		{"no task cgroup", "3,1,1,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),task=x,pid=1\n", OOMKill{}, false},
		{"garbage", "hello", OOMKill{}, false},
		{"no header", "oom-kill:task_memcg=/slurm_node1/uid_1/job_2/step_batch/task_0,pid=1", OOMKill{}, false},
		{"written by root into /dev/kmsg (facility user)",
			"11,1023,17749083700,-;oom-kill:constraint=CONSTRAINT_MEMCG,task_memcg=/slurm_node1/uid_1/job_2/step_batch/task_0,task=x,pid=1\n",
			OOMKill{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseOOM(tc.record)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseOOM (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseOOM(f *testing.F) {
	f.Add("3,1,1,-;oom-kill:task_memcg=/a/job_1,pid=1")
	f.Fuzz(func(t *testing.T, s string) {
		if k, ok := ParseOOM(s); ok && (k.TaskCgroup == "" || k.TaskCgroup[0] != '/') {
			t.Errorf("accepted %q with task cgroup %q", s, k.TaskCgroup)
		}
	})
}

func FuzzParseXid(f *testing.F) {
	f.Add("3,1,1,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.")
	f.Fuzz(func(t *testing.T, s string) {
		if x, ok := ParseXid(s); ok && (x.Bus == "" || len(x.Bus) > 32 || strings.Trim(x.Bus, "0123456789abcdefABCDEF:.") != "" || x.Code < 0) {
			t.Errorf("accepted %q as %+v", s, x)
		}
	})
}

func TestParseXid(t *testing.T) {
	for _, tc := range []struct {
		name, record string
		want         Xid
		ok, hardware bool
	}{
		{"fallen off the bus", "3,2201,88120931,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n",
			Xid{Bus: "0000:3b:00", Code: 79, Text: "pid=1234, name=python, GPU has fallen off the bus."}, true, true},
		{"uncorrectable ECC (double bit)", "4,17,5,-;NVRM: Xid (PCI:0000:86:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
			Xid{Bus: "0000:86:00", Code: 48, Text: "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."}, true, true},
		{"a program's fault is not the hardware's", "4,18,6,-;NVRM: Xid (PCI:0000:86:00): 13, pid=99, name=a.out, Graphics SM Warp Exception",
			Xid{Bus: "0000:86:00", Code: 13, Text: "pid=99, name=a.out, Graphics SM Warp Exception"}, true, false},
		{"written by root into /dev/kmsg (facility user)", "12,19,7,-;NVRM: Xid (PCI:0000:3b:00): 79, forged", Xid{}, false, false},
		{"another NVRM line", "4,20,8,-;NVRM: GPU at PCI:0000:3b:00: GPU-1234", Xid{}, false, false},
		{"no code", "4,21,9,-;NVRM: Xid (PCI:0000:3b:00): x", Xid{}, false, false},
		{"not a PCI address", "0,22,9,-;NVRM: Xid (PCI:)): 0", Xid{}, false, false},
		{"a PCI address with a function", "4,23,9,-;NVRM: Xid (PCI:0000:3B:00.0): 94, Contained ECC error",
			Xid{Bus: "0000:3B:00.0", Code: 94, Text: "Contained ECC error"}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseXid(tc.record)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseXid (-want +got):\n%s", diff)
			}
			if got.Hardware() != tc.hardware {
				t.Errorf("Hardware() = %v, want %v", got.Hardware(), tc.hardware)
			}
		})
	}
}
