package procio

import (
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/persyst/persyst/hostfs"
)

func TestDescendants(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var got []int
	for i := 0; i < 100; i++ {
		if got = Descendants(hostfs.New("/"), os.Getpid()); len(got) >= 3 {
			break
		}
		exec.Command("true").Run() // give sh time to start sleep
	}
	if got[0] != os.Getpid() || !slices.Contains(got, cmd.Process.Pid) || len(got) < 3 {
		t.Errorf("Descendants(self) = %v: want self, the shell %d and its sleep", got, cmd.Process.Pid)
	}
	if got := Descendants(hostfs.New(t.TempDir()), 7); !slices.Equal(got, []int{7}) {
		t.Errorf("without /proc: %v", got)
	}
}
