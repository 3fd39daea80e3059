// Package nvmltest builds persyst-nvml and the FAKE libnvidia-ml.so.1 (nvml/helper/fake.c)
// for tests on machines without an NVIDIA GPU, once per test binary. A package that
// builds them runs its tests with Main, which removes them at the end.
package nvmltest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/persyst/persyst/internal/testenv"
)

// Built are the programs Build made.
type Built struct {
	Helper  string // persyst-nvml
	Fake    string // the fake library, a current driver's functions
	FakeOld string // the fake library as an old driver: no GPM, no samples, no energy
}

var (
	once  sync.Once
	dir   string // what Build made, removed by Main
	built Built
	err   error
	log   []byte
)

// Build compiles the helper and the fakes (cc, as the Makefile does).
func Build(tb testing.TB) Built {
	tb.Helper()
	cc := testenv.Program(tb, "cc", "gcc")
	once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		src := filepath.Join(filepath.Dir(file), "..", "helper")
		if dir, err = os.MkdirTemp("", "persyst-nvmltest"); err != nil {
			return
		}
		built = Built{Helper: filepath.Join(dir, "persyst-nvml"),
			Fake: filepath.Join(dir, "fake", "libnvidia-ml.so.1"), FakeOld: filepath.Join(dir, "old", "libnvidia-ml.so.1")}
		for _, d := range []string{"fake", "old"} {
			if err = os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				return
			}
		}
		for _, args := range [][]string{
			{"-O2", "-Wall", "-Wextra", "-Werror", "-o", built.Helper, filepath.Join(src, "helper.c"), "-ldl"},
			{"-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", "-fvisibility=hidden", "-o", built.Fake, filepath.Join(src, "fake.c")},
			{"-O2", "-Wall", "-Wextra", "-Werror", "-DFAKE_OLD", "-fPIC", "-shared", "-fvisibility=hidden", "-o", built.FakeOld, filepath.Join(src, "fake.c")},
		} {
			if log, err = exec.Command(cc, args...).CombinedOutput(); err != nil {
				return
			}
		}
	})
	if err != nil {
		tb.Fatalf("building persyst-nvml and the fake NVML: %v\n%s", err, log)
	}
	return built
}

// Main runs the tests and removes what Build made; a TestMain calls
// os.Exit(nvmltest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(os.Stderr, "nvmltest: %v\n", err)
		}
	}
	return code
}

// Scenario writes a fake NVML scenario (nvml/helper/fake.c says its lines) and returns
// the environment that gives it to the fake.
func Scenario(tb testing.TB, text string) []string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "scenario")
	testenv.Write(tb, p, text)
	return []string{"PERSYST_FAKE_NVML=" + p}
}
