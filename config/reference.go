package config

import (
	"fmt"
	"strings"
)

// keyDoc is what docs/admin.md says of a persyst.conf key: its meaning and default.
type keyDoc struct{ key, meaning, def string }

// keyDocs document every key of fields, in the order of the reference, and the key
// patterns and tree lines the parser knows besides (TestReference keeps them in step).
var keyDocs = []keyDoc{
	{"CycleSeconds", "measurement cycle, 1 to 3600 s (all nodes read at multiples of it)", "60"},
	{"GPUIndex", "what Slurm's GRES index of a GPU is: `slurmd` (the device file `slurmd -G` numbers so, asked once as the daemon starts: right for gres.conf's `File=` lines, `AutoDetect` and nodes with NVIDIA's and AMD's GPUs; NVML's order where slurmd does not answer, said in the daemon's log), `nvml` (gres.conf `AutoDetect=nvml`: NVML's order, by PCI bus id, AMD's GPUs after NVIDIA's) or `minor` (gres.conf `File=/dev/nvidiaN` lines: the device's minor number N)", "`slurmd`"},
	{"SyscallBudget", "the most extra time counting system calls (eBPF fentry programs, or the raw tracepoint where the kernel refuses those) may cost the node's programs, all together, as a share of one CPU (so no program is slowed by more; one outside every measured job, once its calls would cost half of it, by an eighth of it): beyond it, after a burst (2.5 ms of extra time at 0.25 %), calls are counted in samples and jobs' counts are estimates, which their digests say (docs/metrics.md); `0%`: every call, whatever it costs", "`0.25%`"},
	{"PowercapDir", "where the node's powercap tree (RAPL energy counters) lies: a daemon in a container sees the host's elsewhere (docs/metrics.md, Energy)", "`/sys/class/powercap`"},
	{"AMDGPUSysfs", "the kernel's sysfs that AMD GPUs are read in (the amdgpu driver's cards and the KFD's processes): a daemon in a container sees the host's elsewhere (docs/metrics.md, GPUs)", "`/sys`"},
	{"BMCRedfish", "the node's chassis on its BMC (`https://%n-bmc/redfish/v1/Chassis/1`, `%n`: the node's name), read through Redfish at most once a cycle for the node's whole power (docs/metrics.md, Energy); none: RAPL only", "none"},
	{"BMCUser", "the BMC account persyst reads with (one that may only read)", "none"},
	{"BMCPasswordFile", "the file that holds the BMC account's password, alone on one line, readable by its owner only (root); refused with an `http://` BMCRedfish", "none"},
	{"BMCCA", "certificates (PEM) the BMC's is checked against", "the system's"},
	{"BMCTimeout", "the most one request to the BMC may take: a BMC that does not answer in it holds up nothing, and its energy is left out (RAPL's alone)", "2"},
	{"EnergyCO2PerKWh", "grams of CO2-equivalent per kWh of the site's electricity: digests give a job's emissions beside its energy; `0`: none", "0"},
	{"Digest", "`on`/`off`: write digests into job output files (evaluation and reports go on)", "on"},
	{"DigestMinSeconds", "jobs shorter than this get only robust findings", "300"},
	{"AccountingSummary", "`on`/`off`: keep a summary of each job's digest in its AdminComment in Slurm's accounting (`persyst report --sacct`; docs/admin.md)", "on"},
	{"MailProg", "the site's mail program, which `persyst mail` (Slurm's MailProg) hands mails to (docs/admin.md)", "/usr/bin/mail"},
	{"WebURL", "where users reach the web view (`https://host/path`, behind the site's proxy): links in the efficiency reports `persyst site --mail` sends", "none"},
	{"ReportOptOut", "a file of users (one a line, `#` comments) who get no efficiency report by mail, as users or as coordinators", "none"},
	{"ReportMinWastedHours", "a user or account whose jobs left fewer CPU- and GPU-hours idle in the period gets no efficiency report", "10"},
	{"NoticeIdleGPUAfter", "a running job whose GPUs all ran nothing this long is told, once, on its batch host: a line in its output file, a mail (`NoticeMail`), the site's `NoticeCommand`; `0`: never (docs/admin.md)", "1h"},
	{"NoticeIdleCPUAfter", "the same for a job whose CPUs were busy under a tenth of the time", "2h"},
	{"NoticeMail", "`on`/`off`: send the notice to the job's user by mail too (`MailProg`)", "on"},
	{"NoticeCommand", "an executable run as root with the job id, its user, the reason (`gpu_idle`, `cpu_idle`) and the seconds idle, once per job and reason (to hold, cancel or open a ticket), within 60 s", "none"},
	{"StrategyFile", "replaces the built-in strategy tree (absolute path)", "built in"},
	{"Threshold.<property id>", "a property's threshold (units K/M/G/KiB/MiB/GiB/%)", "the catalog's"},
	{"CalibrationDir", "where `persyst calibrate` keeps each node type's values", "/var/lib/persyst/calibration"},
	{"MetricSource.<name>", "`on`/`off`: turn a metric source on or off (names in docs/metrics.md)", "each source's default"},
	{"SlurmRestd", "the job map's slurmrestd: `unix:PATH` or `https://HOST:PORT` (below)", "Slurm's commands"},
	{"SlurmRestdUser", "the user a JWT for slurmrestd over TCP is for", "none"},
	{"SlurmRestdTokenFile", "the file holding that JWT (`scontrol token username=...`)", "none"},
	{"SlurmRestdTimeout", "seconds a slurmrestd request may take", "10"},
	{"AdminGroup", "a group (name or gid) whose members read every job's data on the daemons", "none"},
	{"NodePort", "port of the node daemons' gRPC service, on every address (`persyst daemon --grpc-listen` overrides the address): a multi-node job's batch host gathers the other nodes' parts of the job there (without a collector tree), the frontend pushes routes there; authenticated by `TreeAuth`; 0 turns it off (multi-node digests then cover the batch host only, and say so)", "16831"},
	{"Collector", "the collector node daemons send to without a frontend (host:port)", "none"},
	{"CollectorRetention", "how long the tree's agents keep a job's per-cycle results after its end (`h` or `d`)", "30d"},
	{"JobRetention", "how long they keep a job's row and report (the job list, the job's page, `persyst report`) after its end", "400d"},
	{"RollupRetention", "how long the site's daily figures (by cluster, account, user, partition, QOS and finding) stay", "3650d"},
	{"SiteStore", "where the frontend keeps the site's jobs, and `persyst web`, `site`, `report --db` and `db` read them: a SQLite file, or a MariaDB (or MySQL) database `mysql://USER@HOST[:PORT]/DATABASE?password-file=PATH` (`&tls=true`, `&tls-ca=PATH`; `?socket=PATH` on the database's host), the password in a file only its owner reads (docs/admin.md, \"On MariaDB\"); several clusters' frontends may share one database (`ClusterName` tells their jobs apart)", "/var/lib/persyst-frontend/frontend.db"},
	{"ClusterName", "the cluster's name in the tree's databases, so that its job ids never meet another cluster's", "slurm.conf's `ClusterName` beside persyst.conf"},
	{"TreeAuth", "how the tree's agents authenticate each other: `munge`, `tls` or `none` (docs/tree.md)", "munge (tls with the TLS files)"},
	{"MungeSocket", "munged's socket, for `TreeAuth=munge`", "MUNGE's default"},
	{"TreeUsers", "users (names or uids), besides root, the tree's agents run as", "root only"},
	{"TLSCert", "the agent's certificate for mutual TLS in the tree, naming it (`%n`: the agent's name)", "none"},
	{"TLSKey", "its private key (`%n`: the agent's name)", "none"},
	{"TLSCA", "the CA that signed the tree's certificates", "none"},
	{"DaemonMetricsAddr", "where the node daemon serves Prometheus metrics, `host:port` (`0.0.0.0:PORT`: every address; docs/prometheus.md)", "off"},
	{"CollectorMetricsAddr", "where a collector serves Prometheus metrics", "off"},
	{"SyncMetricsAddr", "where a sync agent serves Prometheus metrics", "off"},
	{"FrontendMetricsAddr", "where the frontend serves Prometheus metrics", "off"},
	{"MetricsAllow", "networks (CIDR) or addresses, comma-separated, that may scrape the metrics; others get 403", "loopback only"},
	{"MetricsWebConfig", "the metrics' web configuration file (absolute path): TLS, client certificates, basic auth with bcrypt hashes, in the format every Prometheus exporter takes (docs/prometheus.md); a scrape without its credentials gets 401", "none: plain HTTP"},
	{"MetricsJobLabels", "what the daemon's per-job gauges name: `user,jobid`, `jobid`, or `none` (no per-job gauges; docs/prometheus.md says what a scraper learns)", "jobid"},
	{"Frontend=, Sync=, Collector=NAME Nodes=... lines", "the agent tree (docs/tree.md)", "none"},
}

// Reference is the persyst.conf reference table of docs/admin.md, made from keyDocs.
func Reference() string {
	var b strings.Builder
	b.WriteString("| key | meaning | default |\n|---|---|---|\n")
	for _, d := range keyDocs {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", d.key, d.meaning, d.def)
	}
	return b.String()
}
