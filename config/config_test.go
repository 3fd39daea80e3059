package config

import (
	"bytes"
	"flag"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/persyst/persyst/internal/docsection"
)

var update = flag.Bool("update", false, "rewrite docs/admin.md's key reference")

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Config
		wantErr string
	}{
		{"empty", "", Defaults(), ""},
		{"comments and blanks", "# persyst\n\n   # x\n", Defaults(), ""},
		{"unix socket", "SlurmRestd=unix:/run/slurmrestd.sock\n", with(func(c *Config) { c.SlurmRestd = "unix:/run/slurmrestd.sock" }), ""},
		{"keys are case-insensitive, spaces trimmed", " slurmrestd = unix:/x.sock # local\nSLURMRESTDTIMEOUT=2.5", with(func(c *Config) { c.SlurmRestd, c.SlurmRestdTimeout = "unix:/x.sock", 2500*time.Millisecond }), ""},
		{"jwt", "SlurmRestd=https://ctl:6820\nSlurmRestdUser=persyst\nSlurmRestdTokenFile=/etc/persyst/jwt\nSlurmRestdTimeout=1m",
			with(func(c *Config) {
				c.SlurmRestd, c.SlurmRestdUser, c.SlurmRestdTokenFile, c.SlurmRestdTimeout = "https://ctl:6820", "persyst", "/etc/persyst/jwt", time.Minute
			}), ""},
		{"jwt without token", "SlurmRestd=http://ctl:6820\n", Config{}, "test.conf: SlurmRestd=http://ctl:6820 needs SlurmRestdUser and SlurmRestdTokenFile"},
		{"unknown key", "\nSlurmRest=unix:/x\n", Config{}, `test.conf:2: unknown key "SlurmRest"`},
		{"no equals", "SlurmRestd\n", Config{}, `test.conf:1: want Key=Value`},
		{"empty key", "=x\n", Config{}, `test.conf:1: want Key=Value`},
		{"bad url", "SlurmRestd=/run/x.sock", Config{}, `test.conf:1: SlurmRestd: want unix:/path or http(s)://host:port`},
		{"relative token file", "SlurmRestdTokenFile=jwt", Config{}, `test.conf:1: SlurmRestdTokenFile: want an absolute path`},
		{"cycle", "CycleSeconds=5", with(func(c *Config) { c.Cycle = 5 * time.Second }), ""},
		{"syscall budget", "SyscallBudget=0.25%", with(func(c *Config) { c.SyscallBudget = 0.0025 }), ""},
		{"digest settings", "StrategyFile=/etc/slurm/persyst.strategy\nDigestMinSeconds=30\nDigest=off\nCalibrationDir=/var/cal",
			with(func(c *Config) {
				c.StrategyFile, c.DigestMinSeconds, c.Digest, c.CalibrationDir = "/etc/slurm/persyst.strategy", 30, false, "/var/cal"
			}), ""},
		{"thresholds", "Threshold.cpi=2.5\nthreshold.io_write_request_size = 1MiB\nThreshold.cpu_user_pct=70%",
			with(func(c *Config) {
				c.Thresholds = map[string]float64{"cpi": 2.5, "io_write_request_size": 1 << 20, "cpu_user_pct": 70}
				c.ThresholdLines = map[string]int{"cpi": 1, "io_write_request_size": 2, "cpu_user_pct": 3}
			}), ""},
		{"metric sources", "MetricSource.schedstat=off\nmetricsource.RAPL = on",
			with(func(c *Config) {
				c.Sources = map[string]bool{"schedstat": false, "rapl": true}
				c.SourceLines = map[string]int{"schedstat": 1, "rapl": 2}
			}), ""},
		{"bad source value", "MetricSource.perf=maybe", Config{}, `test.conf:1: MetricSource.perf: want on or off, got "maybe"`},
		{"source twice", "MetricSource.perf=on\nMetricSource.Perf=off", Config{}, `test.conf:2: MetricSource.Perf: already set on line 1`},
		{"GPU index", "GPUIndex=Minor", with(func(c *Config) { c.GPUIndex = "minor" }), ""},
		{"bad GPU index", "GPUIndex=pci", Config{}, `test.conf:1: GPUIndex: want slurmd, nvml or minor, got "pci"`},
		{"powercap tree", "PowercapDir=/host/sys/class/powercap", with(func(c *Config) { c.PowercapDir = "/host/sys/class/powercap" }), ""},
		{"relative powercap tree", "PowercapDir=sys", Config{}, `test.conf:1: PowercapDir: want an absolute path, got "sys"`},
		{"BMC", "BMCRedfish=https://%n-bmc/redfish/v1/Chassis/1\nBMCUser=persyst\nBMCPasswordFile=/etc/persyst/bmc.secret\nBMCCA=/etc/persyst/bmc-ca.pem\nBMCTimeout=1.5",
			with(func(c *Config) {
				c.BMCRedfish, c.BMCUser, c.BMCPasswordFile, c.BMCCA = "https://%n-bmc/redfish/v1/Chassis/1", "persyst", "/etc/persyst/bmc.secret", "/etc/persyst/bmc-ca.pem"
				c.BMCTimeout = 1500 * time.Millisecond
			}), ""},
		{"BMC without a host", "BMCRedfish=/redfish/v1/Chassis/1", Config{}, `test.conf:1: BMCRedfish: want https://HOST/redfish/v1/Chassis/ID (%n: the node's name; the account in BMCUser), got "/redfish/v1/Chassis/1"`},
		{"BMC account in the URL", "BMCRedfish=https://root:calvin@bmc/redfish/v1/Chassis/1", Config{}, `test.conf:1: BMCRedfish: the account goes in BMCUser and BMCPasswordFile, not in the URL (not repeated here)`},
		{"carbon factor", "EnergyCO2PerKWh=380.5", with(func(c *Config) { c.EnergyCO2PerKWh = 380.5 }), ""},
		{"negative carbon factor", "EnergyCO2PerKWh=-1", Config{}, `test.conf:1: EnergyCO2PerKWh: want grams of CO2-equivalent per kWh between 0 and 5000, got "-1"`},
		{"site store on MariaDB", "SiteStore=mysql://persyst@db1/persyst?password-file=/etc/persyst/db.pass",
			with(func(c *Config) { c.SiteStore = "mysql://persyst@db1/persyst?password-file=/etc/persyst/db.pass" }), ""},
		{"site store file", "SiteStore=/srv/persyst/site.db", with(func(c *Config) { c.SiteStore = "/srv/persyst/site.db" }), ""},
		{"site store relative", "SiteStore=site.db", Config{}, `test.conf:1: SiteStore: want an absolute path of a SQLite file, or mysql://USER@HOST/DATABASE?password-file=PATH`},
		{"site store password in the URL", "SiteStore=mysql://persyst:s3cret@db1/persyst", Config{}, `test.conf:1: SiteStore: a password in the mysql:// URL: put it in a file only root can read and name it with password-file= (a URL shows in process lists and logs)`},
		{"collector retention", "CollectorRetention=7d", with(func(c *Config) { c.CollectorRetention = 7 * 24 * time.Hour }), ""},
		{"bad collector retention", "CollectorRetention=7 days", Config{}, `test.conf:1: CollectorRetention: want days (30d) or hours (12h)`},
		{"admin group", "AdminGroup=hpc-admins", with(func(c *Config) { c.AdminGroup = "hpc-admins" }), ""},
		{"bad admin group", "AdminGroup=a b", Config{}, `test.conf:1: AdminGroup: want a group name or gid`},
		{"tree auth", "TreeAuth=none\nMungeSocket=/run/m.sock\nTreeUsers=persyst,991", with(func(c *Config) {
			c.TreeAuth, c.MungeSocket, c.TreeUsers = "none", "/run/m.sock", []string{"persyst", "991"}
		}), ""},
		{"bad tree auth", "TreeAuth=off", Config{}, `test.conf:1: TreeAuth: want munge, tls or none, got "off"`},
		{"relative munge socket", "MungeSocket=m.sock", Config{}, `test.conf:1: MungeSocket`},
		{"bad tree users", "TreeUsers=a,,b", Config{}, `test.conf:1: TreeUsers: want user names or uids`},
		{"collector", "Collector=collector1:16830", with(func(c *Config) { c.Collector = "collector1:16830" }), ""},
		{"bad collector", "Collector=collector1", Config{}, `test.conf:1: Collector: want host:port`},
		{"collector port not a number", "Collector=collector1:http", Config{}, `test.conf:1: Collector: want host:port`},
		{"collector port out of range", "Collector=collector1:70000", Config{}, `test.conf:1: Collector: want host:port`},
		{"collector host with an underscore", "Collector=bad_host:80", Config{}, `test.conf:1: Collector: want host:port`},
		{"collector IPv6", "Collector=[::1]:16830", with(func(c *Config) { c.Collector = "[::1]:16830" }), ""},
		{"NaN digest seconds", "DigestMinSeconds=NaN", Config{}, `test.conf:1: DigestMinSeconds: want seconds between 0 and 86400`},
		{"infinite threshold", "Threshold.cpi=Inf", Config{}, `test.conf:1: Threshold.cpi: want a positive number`},
		{"NaN threshold", "Threshold.cpi=NaN", Config{}, `test.conf:1: Threshold.cpi: want a positive number`},
		{"tiny timeout", "SlurmRestdTimeout=1e-300", Config{}, `test.conf:1: SlurmRestdTimeout: want seconds between 0.001 and 3600`},
		{"bad slurmrestd url", "SlurmRestd=http://", Config{}, `test.conf:1: SlurmRestd: want unix:/path or http(s)://host:port`},
		{"bad slurmrestd user", "SlurmRestdUser=a b", Config{}, `test.conf:1: SlurmRestdUser: want a user name`},
		{"over-long line", "CycleSeconds=5\nTree=" + strings.Repeat("x", 2<<20) + "\n", Config{}, `test.conf:2: line longer than 1048576 bytes`},
		{"tree lines keep their line numbers", "CycleSeconds=5\nFrontend=fe Syncs=s1\nCollector=c0:1\nsync=s1 Collectors=c1 # spine\nCollector=c1 Nodes=n[1-4] Addr=c1:16830\n",
			with(func(c *Config) {
				c.Cycle, c.Collector = 5*time.Second, "c0:1"
				c.Tree = "\nFrontend=fe Syncs=s1\n\nsync=s1 Collectors=c1\nCollector=c1 Nodes=n[1-4] Addr=c1:16830\n"
			}), ""},
		{"bad threshold", "Threshold.cpi=fast", Config{}, `test.conf:1: Threshold.cpi: want a positive number`},
		{"threshold twice", "Threshold.cpi=1\nThreshold.cpi=2", Config{}, `test.conf:2: Threshold.cpi: already set on line 1`},
		{"relative strategy", "StrategyFile=my.strategy", Config{}, `test.conf:1: StrategyFile: want an absolute path`},
		{"cycle below 1 s", "CycleSeconds=0.5", Config{}, `test.conf:1: CycleSeconds: want whole seconds between 1 and 3600, got "0.5"`},
		{"syscall budget without %", "SyscallBudget=0.0025", Config{}, `test.conf:1: SyscallBudget: want a percentage of one CPU's time (0% to 100%, e.g. 0.25%), got "0.0025"`},
		{"bad timeout", "SlurmRestdTimeout=-1", Config{}, `test.conf:1: SlurmRestdTimeout: want seconds`},
		{"timeout too long", "SlurmRestdTimeout=2h", Config{}, `test.conf:1: SlurmRestdTimeout: want seconds`},
		{"repeated key", "SlurmRestd=unix:/a\nslurmrestd=unix:/b\n", Config{}, `test.conf:2: SlurmRestd already set on line 1`},
		{"metrics", "DaemonMetricsAddr=0.0.0.0:9818\nCollectorMetricsAddr=[::]:9819\nSyncMetricsAddr=10.0.0.1:9819\nFrontendMetricsAddr=fe1:9820\nMetricsAllow=10.0.0.0/8, 192.168.1.7,::1",
			with(func(c *Config) {
				c.DaemonMetricsAddr, c.CollectorMetricsAddr, c.SyncMetricsAddr, c.FrontendMetricsAddr = "0.0.0.0:9818", "[::]:9819", "10.0.0.1:9819", "fe1:9820"
				c.MetricsAllow = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"), netip.MustParsePrefix("::1/128")}
			}), ""},
		{"accounting summary off", "AccountingSummary=off", with(func(c *Config) { c.AccountingSummary = false }), ""},
		{"accounting summary bad", "AccountingSummary=maybe", Config{}, `test.conf:1: AccountingSummary: want on or off, got "maybe"`},
		{"metrics address without a host", "DaemonMetricsAddr=:9818", Config{}, `test.conf:1: DaemonMetricsAddr: want host:port with the host written out (0.0.0.0:9818 for every address)`},
		{"metrics address without a port", "FrontendMetricsAddr=0.0.0.0", Config{}, `test.conf:1: FrontendMetricsAddr: want host:port`},
		{"metrics allow not a network", "MetricsAllow=10.0.0.0/8,prometheus", Config{}, `test.conf:1: MetricsAllow: want networks (10.0.0.0/8) or addresses separated by commas, got "prometheus"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.in), "test.conf")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("config mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadMissing(t *testing.T) {
	c, err := Load(t.TempDir()+"/none.conf", true)
	if err != nil || !cmp.Equal(c, Defaults()) {
		t.Errorf("Load(missing, optional) = %+v, %v; want defaults", c, err)
	}
	if _, err := Load(t.TempDir()+"/none.conf", false); err == nil || !strings.Contains(err.Error(), "none.conf") {
		t.Errorf("Load(missing, required) error = %v, want one naming the file", err)
	}
}

func with(f func(*Config)) Config {
	c := Defaults()
	f(&c)
	return c
}

// TestDocsListEveryKey: docs/admin.md's table names every key persyst.conf takes.
func TestDocsListEveryKey(t *testing.T) {
	// Every key the parser takes is documented, and every documented key is one.
	docs := map[string]bool{}
	for _, d := range keyDocs {
		docs[d.key] = true
	}
	for _, f := range fields {
		if !docs[f.name] {
			t.Errorf("key %s has no entry in keyDocs (config/reference.go)", f.name)
		}
		delete(docs, f.name)
	}
	for k := range docs {
		if !strings.ContainsAny(k, "<=") {
			t.Errorf("keyDocs documents %s, which is no key", k)
		}
	}
	// docs/admin.md holds the reference made from them (go test ./config -update).
	docsection.Check(t, "../docs/admin.md", "<!-- persyst.conf keys: made by go test ./config -update -->\n", "<!-- end of keys -->\n",
		Reference(), *update, "go test ./config -update")
}

// TestPackagedExamples: every commented example of packaging/persyst.conf is a valid line
// (the https slurmrestd example with the user and token lines it needs).
func TestPackagedExamples(t *testing.T) {
	b, err := os.ReadFile("../packaging/persyst.conf")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(bytes.NewReader(b), "persyst.conf"); err != nil {
		t.Fatalf("as shipped: %v", err)
	}
	const jwt = "SlurmRestdUser=persyst\nSlurmRestdTokenFile=/etc/persyst/slurmrestd.jwt\n"
	n := 0
	for i, l := range strings.Split(string(b), "\n") {
		k, _, ok := strings.Cut(strings.TrimPrefix(l, "#"), "=")
		if !strings.HasPrefix(l, "#") || !ok || strings.ContainsAny(k, " \t") {
			continue
		}
		text := l[1:] + "\n"
		if strings.HasPrefix(text, "SlurmRestd=http") {
			text += jwt
		}
		if strings.HasPrefix(text, "SlurmRestdUser=") || strings.HasPrefix(text, "SlurmRestdTokenFile=") {
			continue
		}
		n++
		if _, err := Parse(strings.NewReader(text), "persyst.conf"); err != nil {
			t.Errorf("packaging/persyst.conf:%d: %v", i+1, err)
		}
	}
	if n < 10 {
		t.Errorf("only %d examples found", n)
	}
}
