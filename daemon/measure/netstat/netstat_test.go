package netstat

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/persyst/persyst/hostfs"
)

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestParseNetDev(t *testing.T) {
	tests := []struct {
		file string
		want []Iface
		err  string
	}{
		{"machine.txt", []Iface{
			{"lo", 126116617, 1308738, 126116617, 1308738},
			{"ifb0", 0, 0, 0, 0},
			{"ifb1", 0, 0, 0, 0},
			{"eth0", 60994437, 4680, 559048, 4601},
		}, ""},
		{"wide.txt", []Iface{
			{"lo", 12345678901, 1308738, 12345678901, 1308738},
			{"eth0", 98765432109876, 70000000000, 55555555555555, 66666666666},
			{"enp129s0f1np1", 1, 2, 3, 4},
		}, ""},
		{"short-line.txt", nil, "line 3: eth0: want 16 numbers, got 15"},
		{"bad-number.txt", nil, `line 4: eth0 tx_packets: want a number, got "x"`},
		{"no-colon.txt", nil, `line 3: want "name: 16 numbers", got "  eth0 1 2 0 0 0 0 0 0 3 4 0 0 0 0 0 0"`},
		{"empty-name.txt", nil, `line 3: empty interface name in "      : 1 2 0 0 0 0 0 0 3 4 0 0 0 0 0 0"`},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata/netdev", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := parseNetDev(f)
			if diff := cmp.Diff(tt.err, errString(err)); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseNetDevHeaderOnly(t *testing.T) {
	got, err := parseNetDev(strings.NewReader("Inter-|\n face |\n"))
	if err != nil || got != nil {
		t.Errorf("got %v, %v; want nil, nil", got, err)
	}
}

// rootWith makes an FS root holding the fixture as proc/net/dev.
func rootWith(t *testing.T, fixture string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata/netdev", fixture))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "proc/net"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc/net/dev"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestReadNet(t *testing.T) {
	root := rootWith(t, "machine.txt")
	tests := []struct {
		name    string
		exclude func(string) bool
		want    Counters
	}{
		{"default excludes lo", nil, Counters{60994437, 4680, 559048, 4601, []string{"ifb0", "ifb1", "eth0"}}},
		{"custom", func(n string) bool { return n == "lo" || strings.HasPrefix(n, "ifb") },
			Counters{60994437, 4680, 559048, 4601, []string{"eth0"}}},
		{"all", func(string) bool { return false },
			Counters{126116617 + 60994437, 1308738 + 4680, 126116617 + 559048, 1308738 + 4601, []string{"lo", "ifb0", "ifb1", "eth0"}}},
		{"none: not measured", func(string) bool { return true }, Counters{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadNet(hostfs.New(root), tt.exclude)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	t.Run("malformed names the file", func(t *testing.T) {
		_, err := ReadNet(hostfs.New(rootWith(t, "short-line.txt")), nil)
		if diff := cmp.Diff("netstat: /proc/net/dev: line 3: eth0: want 16 numbers, got 15", errString(err)); diff != "" {
			t.Errorf("error (-want +got):\n%s", diff)
		}
	})
	t.Run("missing", func(t *testing.T) {
		_, err := ReadNet(hostfs.New(t.TempDir()), nil)
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("got %v, want an error wrapping fs.ErrNotExist", err)
		}
	})
}

// TestReadNetReal reads this machine's /proc/net/dev twice: lo is excluded and the
// counters do not decrease.
func TestReadNetReal(t *testing.T) {
	fsys := hostfs.New("/")
	a, err := ReadNet(fsys, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	b, err := ReadNet(fsys, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("interfaces %v: rx %d B %d pkts, tx %d B %d pkts", b.Ifaces, b.RxBytes, b.RxPackets, b.TxBytes, b.TxPackets)
	if slices.Contains(a.Ifaces, "lo") {
		t.Errorf("lo counted: %v", a.Ifaces)
	}
	if !slices.Equal(a.Ifaces, b.Ifaces) {
		t.Fatalf("interfaces changed between reads: %v, %v", a.Ifaces, b.Ifaces)
	}
	if b.RxBytes < a.RxBytes || b.RxPackets < a.RxPackets || b.TxBytes < a.TxBytes || b.TxPackets < a.TxPackets {
		t.Errorf("counters went down: %+v then %+v", a, b)
	}
}

func TestReadInfiniBand(t *testing.T) {
	got, err := ReadInfiniBand(hostfs.New("testdata/ib"))
	if err != nil {
		t.Fatal(err)
	}
	want := []IBPort{
		{Device: "mlx5_0", Port: 1, XmitBytes: 4000, RcvBytes: 8000, XmitPackets: 30, RcvPackets: 40},
		{Device: "mlx5_0", Port: 2, XmitBytes: 4 * (1<<32 - 1), RcvBytes: 20, XmitPackets: 1<<32 - 1, RcvPackets: 6, Saturated: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestReadInfiniBandNone(t *testing.T) {
	got, err := ReadInfiniBand(hostfs.New(t.TempDir()))
	if got != nil || err != nil {
		t.Errorf("got %v, %v; want nil, nil (no InfiniBand)", got, err)
	}
}

// TestReadInfiniBandPartial: ports that cannot be measured are listed with Missing, the
// others are read; only malformed content is an error.
func TestReadInfiniBandPartial(t *testing.T) {
	root := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		p := filepath.Join(root, "sys/class/infiniband", path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	good := func(dir string) {
		for _, f := range ibCounters {
			write(dir+"/"+f, "1\n")
		}
	}
	good("hfi1_0/ports/1/counters")
	good("mlx4_0/ports/1/counters")
	write("mlx4_0/ports/2/counters/port_xmit_data", "N/A (no PMA)\n")
	good("mlx4_0/ports/10/counters")
	write("qedr0/ports/1/counters/port_xmit_data", "7\n") // the other three are absent
	good("rxe0/ports/1/counters")
	write("rxe0/ports/1/counters/port_rcv_packets", "lots\n")
	write("zz_removed/.keep", "") // a device without ports/ (being removed)

	got, err := ReadInfiniBand(hostfs.New(root))
	wantErr := `netstat: /sys/class/infiniband/rxe0/ports/1/counters/port_rcv_packets: want a number, got "lots"`
	if diff := cmp.Diff(wantErr, errString(err)); diff != "" {
		t.Errorf("error (-want +got):\n%s", diff)
	}
	one := func(dev string, port int) IBPort {
		return IBPort{Device: dev, Port: port, XmitBytes: 4, RcvBytes: 4, XmitPackets: 1, RcvPackets: 1}
	}
	want := []IBPort{
		one("hfi1_0", 1),
		one("mlx4_0", 1),
		{Device: "mlx4_0", Port: 2, Missing: "/sys/class/infiniband/mlx4_0/ports/2/counters/port_xmit_data: N/A (no PMA)"},
		one("mlx4_0", 10),
		{Device: "qedr0", Port: 1, Missing: "/sys/class/infiniband/qedr0/ports/1/counters/port_rcv_data: no such file or directory"},
		{Device: "rxe0", Port: 1, Missing: "/sys/class/infiniband/rxe0/ports/1/counters/port_rcv_packets: malformed"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
