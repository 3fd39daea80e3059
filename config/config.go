// Package config reads /etc/slurm/persyst.conf: Slurm-style "Key=Value" lines (keys are
// case-insensitive, as in slurm.conf; '#' starts a comment; blank lines are ignored).
// An unknown key, a bad value or a repeated key is an error naming the file and line, so
// a typo never silently changes behaviour.
package config

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/persyst/persyst/collectors/store/target"
)

// DefaultPath is where persyst looks for its configuration when SLURM_CONF does not
// say where Slurm's configuration is.
const DefaultPath = "/etc/slurm/persyst.conf"

// DefaultFile is where persyst looks for its configuration: next to slurm.conf, as Slurm
// finds cgroup.conf and its other files (the directory of SLURM_CONF), else DefaultPath.
func DefaultFile() string {
	if s := os.Getenv("SLURM_CONF"); s != "" && filepath.IsAbs(s) {
		return filepath.Join(filepath.Dir(s), "persyst.conf")
	}
	return DefaultPath
}

// Config is persyst.conf.
type Config struct {
	// SlurmRestd is slurmrestd's address: "unix:/path" (rest_auth/local) or
	// "http(s)://host:port" (rest_auth/jwt). Empty: use Slurm's commands.
	SlurmRestd string
	// SlurmRestdUser and SlurmRestdTokenFile give the JWT identity for TCP.
	SlurmRestdUser      string
	SlurmRestdTokenFile string
	// SlurmRestdTimeout bounds one request to slurmrestd.
	SlurmRestdTimeout time.Duration
	// Cycle is the measurement period (CycleSeconds, 1 to 3600 s; default 60 s). Every
	// node reads at Unix times that are multiples of it.
	Cycle time.Duration
	// SyscallBudget, above 0, bounds the extra time counting system calls (eBPF fentry
	// programs, or the raw tracepoint where the kernel refuses those) may cost the node's
	// programs, all together, as a share of one CPU, beyond a burst, by counting in
	// samples (SyscallBudget=0.25%, the default: 0.0025). 0: every call, whatever it costs.
	SyscallBudget float64
	// GPUIndex says what Slurm's GRES index of a GPU (SLURM_JOB_GPUS) is on this
	// cluster: "slurmd" (the default: the device slurmd -G numbers so, whatever
	// gres.conf says; NVML's order where slurmd does not answer), "nvml" (gres.conf
	// AutoDetect=nvml orders GPUs as NVML does, AMD's after them) or "minor" (gres.conf
	// File=/dev/nvidia[0-7] by hand: the device's minor number).
	GPUIndex string
	// StrategyFile replaces the built-in strategy (properties/default.strategy).
	StrategyFile string
	// PowercapDir is where the node's powercap tree (RAPL energy counters) lies ("":
	// /sys/class/powercap; a daemon in a container sees the host's elsewhere).
	PowercapDir string
	// AMDGPUSysfs is the kernel's sysfs the AMD GPUs are read in ("": /sys; a daemon in
	// a container sees the host's elsewhere).
	AMDGPUSysfs string
	// EnergyCO2PerKWh, above 0, is the site's grams of CO2-equivalent per kWh: digests
	// give a job's emissions beside its energy.
	EnergyCO2PerKWh float64
	// BMCRedfish is the node's chassis on its BMC, read through Redfish for the node's
	// whole power ("": none); %n is the node's name. BMCUser and BMCPasswordFile are
	// the account's (the password in a file only its owner reads), BMCCA the
	// certificates the BMC's is checked against ("": the system's); BMCTimeout bounds
	// one request.
	BMCRedfish, BMCUser, BMCPasswordFile, BMCCA string
	BMCTimeout                                  time.Duration
	// Thresholds override property thresholds: Threshold.<id>=<number>[unit].
	// The ids are checked against the catalog when the engine starts.
	Thresholds map[string]float64
	// ThresholdLines says where each threshold was set (for error messages).
	ThresholdLines map[string]int
	// Sources turn metric sources on or off: MetricSource.<name>=on|off (the names are
	// checked against the node's registry when the daemon starts).
	Sources map[string]bool
	// SourceLines says where each source was set (for error messages).
	SourceLines map[string]int
	// DigestMinSeconds: shorter jobs get only the findings robust at that length.
	DigestMinSeconds float64
	// Digest turns the digest in job output files on or off (measurement goes on).
	Digest bool
	// MailProg is the site's mail program, which `persyst mail` hands mails to.
	MailProg string
	// WebURL is where users reach the web view (persyst web behind the site's proxy),
	// for links in mails ("": none).
	WebURL string
	// ReportOptOut names a file of users (one a line, # comments) who get no efficiency
	// report by mail (`persyst site --mail`); ReportMinWastedHours: a user or account
	// whose jobs left fewer CPU- and GPU-hours idle in the period gets none.
	ReportOptOut         string
	ReportMinWastedHours float64
	// NoticeIdleGPUAfter and NoticeIdleCPUAfter: a running job whose GPUs all ran
	// nothing (whose CPUs were busy under a tenth of the time) this long is told, once
	// (0: never); NoticeMail sends the notice to the user by mail too; NoticeCommand is
	// run with the job, its user and the reason.
	NoticeIdleGPUAfter, NoticeIdleCPUAfter time.Duration
	NoticeMail                             bool
	NoticeCommand                          string
	// AccountingSummary keeps a summary of each job's digest in its AdminComment in
	// Slurm's accounting (accounting.Write).
	AccountingSummary bool
	// CalibrationDir holds `persyst calibrate` results, one file per node type.
	CalibrationDir string
	// TLSCert, TLSKey and TLSCA turn on mutual TLS between the agents of the tree.
	TLSCert, TLSKey, TLSCA string
	// TreeAuth is how the agents of the tree authenticate each other: munge (the
	// default), tls (the default with the TLS files) or none.
	TreeAuth string
	// MungeSocket is munged's socket ("": MUNGE's default).
	MungeSocket string
	// TreeUsers are the users, besides root, the tree's agents run as (names or uids):
	// their MUNGE credentials are agents'.
	TreeUsers []string
	// AdminGroup's members read every job's data through the node daemons (a group
	// name or gid); other users read their own jobs only.
	AdminGroup string
	// CollectorRetention is how long the agents of the tree keep a job's per-cycle
	// results in their databases after its end (CollectorRetention=30d; h or d);
	// JobRetention how long they keep its row and report (JobRetention=400d), and
	// RollupRetention how long the site's daily figures stay (RollupRetention=3650d).
	CollectorRetention, JobRetention, RollupRetention time.Duration
	// SiteStore is where the frontend keeps the site's jobs, and where persyst web,
	// site, report --db and db read them: a SQLite file (the default,
	// DefaultSiteStore) or a MariaDB database, mysql://USER@HOST/DATABASE with
	// password-file= (target.ParseMySQL).
	SiteStore string
	// ClusterName names the cluster in the tree's databases, so that its jobs never
	// meet another cluster's with the same ids ("": slurm.conf's ClusterName beside
	// persyst.conf, see ClusterOf).
	ClusterName string
	// Collector is the collector (host:port) node daemons send property records to,
	// until the frontend's routes exist; "" keeps them on the node.
	Collector string
	// NodePort is the port of the node daemons' gRPC service (routes from the frontend,
	// parts of multi-node jobs for their batch hosts); 0: the service is off.
	NodePort int
	// DaemonMetricsAddr, CollectorMetricsAddr, SyncMetricsAddr and FrontendMetricsAddr
	// are where each agent serves Prometheus metrics (host:port; "": off).
	DaemonMetricsAddr, CollectorMetricsAddr, SyncMetricsAddr, FrontendMetricsAddr string
	// MetricsAllow are the networks that may scrape them (nil: loopback only).
	MetricsAllow []netip.Prefix
	// MetricsWebConfig is the web configuration file (TLS, client certificates, basic
	// auth: the format every Prometheus exporter takes) of every agent's /metrics ("":
	// plain HTTP, no authentication).
	MetricsWebConfig string
	// MetricsJobLabels is what labels the daemon's per-job gauges carry: "user,jobid",
	// "jobid" (the default: no user names) or "none" (no per-job gauges).
	MetricsJobLabels string
	// Tree is the explicit agent tree (balance.ParseTreeSpec): the file's
	// "Frontend=", "Sync=" and "Collector=NAME Nodes=..." lines, at their line
	// numbers (other lines blank), so the tree's errors name the file's lines. ""
	// when the file has none.
	Tree string
}

// isTreeLine reports whether a line describes an agent of the tree rather than setting
// a key: it starts with Frontend= or Sync=, or is a Collector= line with more words
// (Nodes=, Addr=); "Collector=host:port" alone is the Collector key.
func isTreeLine(line string) bool {
	f := strings.Fields(line)
	k, _, _ := strings.Cut(f[0], "=")
	return strings.EqualFold(k, "Frontend") || strings.EqualFold(k, "Sync") || (strings.EqualFold(k, "Collector") && len(f) > 1)
}

var groupRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$`)

// Defaults is the configuration without a file.
func Defaults() Config {
	return Config{SlurmRestdTimeout: 10 * time.Second, BMCTimeout: 2 * time.Second, Cycle: 60 * time.Second, CollectorRetention: 30 * 24 * time.Hour,
		JobRetention: 400 * 24 * time.Hour, RollupRetention: 3650 * 24 * time.Hour,
		DigestMinSeconds: 300, Digest: true, AccountingSummary: true, MailProg: "/usr/bin/mail", ReportMinWastedHours: 10,
		NoticeIdleGPUAfter: time.Hour, NoticeIdleCPUAfter: 2 * time.Hour, NoticeMail: true, CalibrationDir: "/var/lib/persyst/calibration", NodePort: 16831,
		MetricsJobLabels: "jobid", SyscallBudget: DefaultSyscallBudget, SiteStore: DefaultSiteStore}
}

// DefaultSiteStore is SiteStore's default: the frontend's SQLite file.
const DefaultSiteStore = "/var/lib/persyst-frontend/frontend.db"

// DefaultSyscallBudget is SyscallBudget's default: counting a program's system calls
// slows it by at most 0.25 % beyond a burst (docs/performance.md).
const DefaultSyscallBudget = 0.0025

type field struct {
	name string
	set  func(c *Config, v string) error
}

var fields = []field{
	{"StrategyFile", func(c *Config, v string) error {
		if !strings.HasPrefix(v, "/") {
			return fmt.Errorf("want an absolute path, got %q", v)
		}
		c.StrategyFile = v
		return nil
	}},
	{"PowercapDir", func(c *Config, v string) error {
		if !strings.HasPrefix(v, "/") {
			return fmt.Errorf("want an absolute path, got %q", v)
		}
		c.PowercapDir = v
		return nil
	}},
	{"AMDGPUSysfs", func(c *Config, v string) error {
		if !strings.HasPrefix(v, "/") {
			return fmt.Errorf("want an absolute path, got %q", v)
		}
		c.AMDGPUSysfs = v
		return nil
	}},
	{"EnergyCO2PerKWh", func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0 && f <= 5000) {
			return fmt.Errorf("want grams of CO2-equivalent per kWh between 0 and 5000, got %q", v)
		}
		c.EnergyCO2PerKWh = f
		return nil
	}},
	{"BMCRedfish", func(c *Config, v string) error {
		u, err := url.Parse(strings.ReplaceAll(v, "%n", "node"))
		if err == nil && u.User != nil {
			return errors.New("the account goes in BMCUser and BMCPasswordFile, not in the URL (not repeated here)")
		}
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("want https://HOST/redfish/v1/Chassis/ID (%%n: the node's name; the account in BMCUser), got %q", v)
		}
		c.BMCRedfish = v
		return nil
	}},
	{"BMCUser", func(c *Config, v string) error { c.BMCUser = v; return nil }},
	{"BMCPasswordFile", func(c *Config, v string) error { return absPath(&c.BMCPasswordFile, v) }},
	{"BMCCA", func(c *Config, v string) error { return absPath(&c.BMCCA, v) }},
	{"BMCTimeout", func(c *Config, v string) error {
		d, err := parseSeconds(v)
		c.BMCTimeout = d
		return err
	}},
	{"DigestMinSeconds", func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0 && f <= 86400) {
			return fmt.Errorf("want seconds between 0 and 86400, got %q", v)
		}
		c.DigestMinSeconds = f
		return nil
	}},
	{"Digest", func(c *Config, v string) error { return onOff(&c.Digest, v) }},
	{"MailProg", func(c *Config, v string) error { return absPath(&c.MailProg, v) }},
	{"WebURL", func(c *Config, v string) error {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("want the web view's address (https://host/path), got %q", v)
		}
		c.WebURL = strings.TrimSuffix(v, "/")
		return nil
	}},
	{"ReportOptOut", func(c *Config, v string) error { return absPath(&c.ReportOptOut, v) }},
	{"NoticeIdleGPUAfter", func(c *Config, v string) error { return noticeAfter(&c.NoticeIdleGPUAfter, v) }},
	{"NoticeIdleCPUAfter", func(c *Config, v string) error { return noticeAfter(&c.NoticeIdleCPUAfter, v) }},
	{"NoticeMail", func(c *Config, v string) error { return onOff(&c.NoticeMail, v) }},
	{"NoticeCommand", func(c *Config, v string) error { return absPath(&c.NoticeCommand, v) }},
	{"ReportMinWastedHours", func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0 && f <= 1e9) {
			return fmt.Errorf("want hours (0 or more), got %q", v)
		}
		c.ReportMinWastedHours = f
		return nil
	}},
	{"AccountingSummary", func(c *Config, v string) error { return onOff(&c.AccountingSummary, v) }},
	{"TLSCert", func(c *Config, v string) error { return absPath(&c.TLSCert, v) }},
	{"TLSKey", func(c *Config, v string) error { return absPath(&c.TLSKey, v) }},
	{"TLSCA", func(c *Config, v string) error { return absPath(&c.TLSCA, v) }},
	{"CollectorRetention", func(c *Config, v string) error {
		d, err := parseDays(v)
		if err != nil {
			return err
		}
		c.CollectorRetention = d
		return nil
	}},
	{"SiteStore", func(c *Config, v string) error {
		if err := target.Check(v); err != nil {
			return err
		}
		c.SiteStore = v
		return nil
	}},
	{"ClusterName", func(c *Config, v string) error {
		if !clusterRE.MatchString(v) {
			return fmt.Errorf("want a cluster name (letters, digits, '_', '-', '.'; at most 64), got %q", v)
		}
		c.ClusterName = v
		return nil
	}},
	{"JobRetention", func(c *Config, v string) error {
		d, err := parseDays(v)
		c.JobRetention = d
		return err
	}},
	{"RollupRetention", func(c *Config, v string) error {
		d, err := parseDays(v)
		c.RollupRetention = d
		return err
	}},
	{"TreeAuth", func(c *Config, v string) error {
		switch v {
		case "munge", "tls", "none":
			c.TreeAuth = v
			return nil
		}
		return fmt.Errorf("want munge, tls or none, got %q", v)
	}},
	{"MungeSocket", func(c *Config, v string) error { return absPath(&c.MungeSocket, v) }},
	{"TreeUsers", func(c *Config, v string) error {
		var users []string
		for _, u := range strings.Split(v, ",") {
			if !groupRE.MatchString(u) {
				return fmt.Errorf("want user names or uids separated by commas, got %q", v)
			}
			users = append(users, u)
		}
		if len(users) > 64 {
			return fmt.Errorf("at most 64 users, got %d", len(users))
		}
		c.TreeUsers = users
		return nil
	}},
	{"AdminGroup", func(c *Config, v string) error {
		if !groupRE.MatchString(v) {
			return fmt.Errorf("want a group name or gid, got %q", v)
		}
		c.AdminGroup = v
		return nil
	}},
	{"Collector", func(c *Config, v string) error {
		if err := checkHostPort(v); err != nil {
			return err
		}
		c.Collector = v
		return nil
	}},
	{"DaemonMetricsAddr", func(c *Config, v string) error { return metricsAddr(&c.DaemonMetricsAddr, v) }},
	{"CollectorMetricsAddr", func(c *Config, v string) error { return metricsAddr(&c.CollectorMetricsAddr, v) }},
	{"SyncMetricsAddr", func(c *Config, v string) error { return metricsAddr(&c.SyncMetricsAddr, v) }},
	{"FrontendMetricsAddr", func(c *Config, v string) error { return metricsAddr(&c.FrontendMetricsAddr, v) }},
	{"MetricsAllow", func(c *Config, v string) error {
		var nets []netip.Prefix
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			p, err := netip.ParsePrefix(s)
			if err != nil {
				a, aerr := netip.ParseAddr(s)
				if aerr != nil {
					return fmt.Errorf("want networks (10.0.0.0/8) or addresses separated by commas, got %q", s)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			nets = append(nets, p.Masked())
		}
		if len(nets) > 256 {
			return fmt.Errorf("at most 256 networks, got %d", len(nets))
		}
		c.MetricsAllow = nets
		return nil
	}},
	{"MetricsWebConfig", func(c *Config, v string) error {
		if !strings.HasPrefix(v, "/") {
			return fmt.Errorf("want an absolute path, got %q", v)
		}
		c.MetricsWebConfig = v
		return nil
	}},
	{"MetricsJobLabels", func(c *Config, v string) error {
		switch v = strings.ReplaceAll(strings.ToLower(v), " ", ""); v {
		case "jobid,user":
			v = "user,jobid"
			fallthrough
		case "user,jobid", "jobid", "none":
			c.MetricsJobLabels = v
			return nil
		}
		return fmt.Errorf("want user,jobid, jobid or none, got %q", v)
	}},
	{"NodePort", func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("want a port number (0: off), got %q", v)
		}
		c.NodePort = n
		return nil
	}},
	{"CalibrationDir", func(c *Config, v string) error {
		if !strings.HasPrefix(v, "/") {
			return fmt.Errorf("want an absolute path, got %q", v)
		}
		c.CalibrationDir = v
		return nil
	}},
	{"CycleSeconds", func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 3600 {
			return fmt.Errorf("want whole seconds between 1 and 3600, got %q", v)
		}
		c.Cycle = time.Duration(n) * time.Second
		return nil
	}},
	{"SyscallBudget", func(c *Config, v string) error {
		n, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
		if err != nil || !strings.HasSuffix(v, "%") || n < 0 || n > 100 {
			return fmt.Errorf("want a percentage of one CPU's time (0%% to 100%%, e.g. 0.25%%), got %q", v)
		}
		c.SyscallBudget = n / 100
		return nil
	}},
	{"GPUIndex", func(c *Config, v string) error {
		switch strings.ToLower(v) {
		case "slurmd", "nvml", "minor":
			c.GPUIndex = strings.ToLower(v)
			return nil
		}
		return fmt.Errorf("want slurmd, nvml or minor, got %q", v)
	}},
	{"SlurmRestd", func(c *Config, v string) error {
		switch {
		case strings.HasPrefix(v, "unix:/"):
		case strings.HasPrefix(v, "http://"), strings.HasPrefix(v, "https://"):
			u, err := url.Parse(v)
			if err != nil || u.Host == "" || checkHostPort(u.Host) != nil && u.Port() != "" {
				return fmt.Errorf("want unix:/path or http(s)://host:port, got %q", v)
			}
		default:
			return fmt.Errorf("want unix:/path or http(s)://host:port, got %q", v)
		}
		c.SlurmRestd = v
		return nil
	}},
	{"SlurmRestdUser", func(c *Config, v string) error {
		if !groupRE.MatchString(v) {
			return fmt.Errorf("want a user name, got %q", v)
		}
		c.SlurmRestdUser = v
		return nil
	}},
	{"SlurmRestdTokenFile", func(c *Config, v string) error {
		if !strings.HasPrefix(v, "/") {
			return fmt.Errorf("want an absolute path, got %q", v)
		}
		c.SlurmRestdTokenFile = v
		return nil
	}},
	{"SlurmRestdTimeout", func(c *Config, v string) error {
		d, err := parseSeconds(v)
		c.SlurmRestdTimeout = d
		return err
	}},
}

// parseSeconds reads a number of seconds ("10", "0.5") or a Go duration ("1m30s"),
// from a millisecond to an hour.
func parseSeconds(v string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0.001 && f <= 3600 {
		return time.Duration(f * float64(time.Second)), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= time.Millisecond && d <= time.Hour {
		return d, nil
	}
	return 0, fmt.Errorf("want seconds between 0.001 and 3600, got %q", v)
}

// parseDays reads a retention: days ("30d") or hours ("12h"), from an hour to ten years.
// ParseDays reads a retention as persyst.conf writes it: days (30d) or hours (12h), from
// 1h to 3650d.
func ParseDays(v string) (time.Duration, error) { return parseDays(v) }

func parseDays(v string) (time.Duration, error) {
	unit := time.Duration(0)
	switch {
	case strings.HasSuffix(v, "d"):
		unit = 24 * time.Hour
	case strings.HasSuffix(v, "h"):
		unit = time.Hour
	}
	n, err := strconv.Atoi(strings.TrimRight(v, "dh"))
	if unit == 0 || err != nil || n < 1 || time.Duration(n)*unit > 3650*24*time.Hour {
		return 0, fmt.Errorf("want days (30d) or hours (12h), from 1h to 3650d, got %q", v)
	}
	return time.Duration(n) * unit, nil
}

// onOff reads on/off (or yes/no).
func onOff(dst *bool, v string) error {
	switch strings.ToLower(v) {
	case "on", "yes":
		*dst = true
	case "off", "no":
		*dst = false
	default:
		return fmt.Errorf("want on or off, got %q", v)
	}
	return nil
}

// metricsAddr sets a Prometheus metrics address: host:port with the host written out
// (0.0.0.0 or [::] for every address), so that no agent listens everywhere by accident.
func metricsAddr(dst *string, v string) error {
	if host, _, err := net.SplitHostPort(v); err == nil && host == "" {
		return fmt.Errorf("want host:port with the host written out (0.0.0.0:%s for every address), got %q", strings.TrimPrefix(v, ":"), v)
	}
	if err := checkHostPort(v); err != nil {
		return err
	}
	*dst = v
	return nil
}

// checkHostPort checks a host:port address: a host name or IP address and a port from 1
// to 65535.
func checkHostPort(v string) error {
	host, port, err := net.SplitHostPort(v)
	if err == nil {
		var p int
		p, err = strconv.Atoi(port)
		if err == nil && (p < 1 || p > 65535) {
			err = errors.New("port out of range")
		}
	}
	if err == nil && net.ParseIP(host) == nil && !hostRE.MatchString(host) {
		err = errors.New("bad host")
	}
	if err != nil {
		return fmt.Errorf("want host:port, got %q", v)
	}
	return nil
}

var hostRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?$`)

// Load reads the file at path; a missing file gives the defaults when optional is true.
func Load(path string, optional bool) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		if optional && os.IsNotExist(err) {
			return Defaults(), nil
		}
		return Config{}, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	return Parse(f, path)
}

var clusterRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ClusterOf is the cluster's name: persyst.conf's ClusterName, else the ClusterName of
// the slurm.conf beside path (persyst.conf's path), else "".
func (c Config) ClusterOf(path string) string {
	if c.ClusterName != "" {
		return c.ClusterName
	}
	f, err := os.Open(filepath.Join(filepath.Dir(path), "slurm.conf"))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "ClusterName") {
			if v = strings.TrimSpace(v); clusterRE.MatchString(v) {
				return v
			}
			return ""
		}
	}
	return ""
}

// maxLine bounds a line of persyst.conf (tree lines carry hostlists).
const maxLine = 1 << 20

// Parse reads a configuration; name is used in error messages.
func Parse(r io.Reader, name string) (Config, error) {
	c := Defaults()
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	n := 0
	var tree strings.Builder
	treeLines := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if isTreeLine(line) {
			tree.WriteString(strings.Repeat("\n", n-1-treeLines))
			tree.WriteString(line)
			treeLines = n - 1
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return Config{}, fmt.Errorf("%s:%d: want Key=Value, got %q", name, n, line)
		}
		if id, ok := cutPrefixFold(k, "Threshold."); ok {
			if err := c.setThreshold(id, v, n); err != nil {
				return Config{}, fmt.Errorf("%s:%d: %s: %w", name, n, k, err)
			}
			continue
		}
		if src, ok := cutPrefixFold(k, "MetricSource."); ok {
			if err := c.setSource(src, v, n); err != nil {
				return Config{}, fmt.Errorf("%s:%d: %s: %w", name, n, k, err)
			}
			continue
		}
		var fd *field
		for i := range fields {
			if strings.EqualFold(fields[i].name, k) {
				fd = &fields[i]
			}
		}
		if fd == nil {
			return Config{}, fmt.Errorf("%s:%d: unknown key %q", name, n, k)
		}
		if prev, dup := seen[fd.name]; dup {
			return Config{}, fmt.Errorf("%s:%d: %s already set on line %d", name, n, fd.name, prev)
		}
		seen[fd.name] = n
		if err := fd.set(&c, v); err != nil {
			return Config{}, fmt.Errorf("%s:%d: %s: %w", name, n, fd.name, err)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Config{}, fmt.Errorf("%s:%d: line longer than %d bytes", name, n+1, maxLine)
		}
		return Config{}, fmt.Errorf("read %s: %w", name, err)
	}
	if tree.Len() > 0 {
		c.Tree = tree.String() + "\n"
	}
	if strings.HasPrefix(c.SlurmRestd, "http") && (c.SlurmRestdUser == "" || c.SlurmRestdTokenFile == "") {
		return Config{}, fmt.Errorf("%s: SlurmRestd=%s needs SlurmRestdUser and SlurmRestdTokenFile (JWT)", name, c.SlurmRestd)
	}
	return c, nil
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return "", false
}

var quantityUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"%", 1},
}

// ParseQuantity reads a number with an optional unit suffix: "2MiB", "1.1M", "80%",
// "0.5" (K/M/G/T are powers of 1000, KiB/MiB/GiB/TiB of 1024, % is the number itself).
func ParseQuantity(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	mult := 1.0
	for _, u := range quantityUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v * mult, true
}

// setSource records MetricSource.<name>=on|off.
func (c *Config) setSource(src, v string, line int) error {
	if src == "" {
		return fmt.Errorf("want MetricSource.<source name>=on|off")
	}
	src = strings.ToLower(src)
	if prev, dup := c.SourceLines[src]; dup {
		return fmt.Errorf("already set on line %d", prev)
	}
	var on bool
	switch strings.ToLower(v) {
	case "on", "yes":
		on = true
	case "off", "no":
	default:
		return fmt.Errorf("want on or off, got %q", v)
	}
	if c.Sources == nil {
		c.Sources, c.SourceLines = map[string]bool{}, map[string]int{}
	}
	c.Sources[src], c.SourceLines[src] = on, line
	return nil
}

// setThreshold records Threshold.<id>=<number>[unit] (units as in the catalog).
func (c *Config) setThreshold(id, v string, line int) error {
	if id == "" || strings.ContainsAny(id, " \t=") {
		return fmt.Errorf("want Threshold.<property id>=<number>")
	}
	if prev, dup := c.ThresholdLines[id]; dup {
		return fmt.Errorf("already set on line %d", prev)
	}
	f, ok := ParseQuantity(v)
	if !ok || !(f > 0 && f < 1e18) {
		return fmt.Errorf("want a positive number (optionally with K, M, G, KiB, MiB, GiB or %%), got %q", v)
	}
	if c.Thresholds == nil {
		c.Thresholds, c.ThresholdLines = map[string]float64{}, map[string]int{}
	}
	c.Thresholds[id] = f
	c.ThresholdLines[id] = line
	return nil
}

func absPath(dst *string, v string) error {
	if !strings.HasPrefix(v, "/") {
		return fmt.Errorf("want an absolute path, got %q", v)
	}
	*dst = v
	return nil
}

// noticeAfter reads how long a job must hold a resource idle before it is told: 0 (never)
// or a duration (90s, 30m, 1h30m) of at most 30 days.
func noticeAfter(d *time.Duration, v string) error {
	if v == "0" {
		*d = 0
		return nil
	}
	x, err := time.ParseDuration(v)
	if err != nil || x < time.Second || x > 30*24*time.Hour {
		return fmt.Errorf("want 0 (never) or a duration from 1s to 720h (e.g. 1h or 90m), got %q", v)
	}
	*d = x
	return nil
}
