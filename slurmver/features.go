package slurmver

// Feature is a change of Slurm that persyst reads differently from the release that made
// it on: one row of changes. Code that decides by release asks rel.Has(feature), never
// for a release number, so that what a new release changes is one row here
// (docs/development.md, "Adding a Slurm release").
type Feature int

// The changes, oldest first. What persyst meets by reading what it finds rather than by
// the release (the cgroup layouts of daemon/jobcgroup, the state names of digest and the
// job map, the data parsers slurmrestd lists) is not here.
const (
	DataParserPlugins Feature = iota
	SacctmgrKeepsCase
	DataParserV0042
	OutputPartlyExpanded
	OutputExpanded
	SLUIDCgroups
	numFeatures
)

// change is one row of changes: the feature's name (its identifier), the first release
// that has it, and what changed there.
type change struct {
	Name  string
	Since Release
	Why   string
}

// changes is the one table of release decisions, by feature, oldest first.
var changes = [numFeatures]change{
	DataParserPlugins: {"DataParserPlugins", Release{23, 2, 0},
		"Slurm's JSON comes from data_parser plugins (v0.0.39 on), asked for by name (--json=VERSION): squeue --json and scontrol --json no longer print v0.0.38's form, so the commands are asked for one job, not every job"},
	SacctmgrKeepsCase: {"SacctmgrKeepsCase", Release{23, 2, 0},
		"sacctmgr no longer lowercases the AdminComment it sets (strip_quotes' lower argument)"},
	DataParserV0042: {"DataParserV0042", Release{24, 11, 0},
		"data_parser/v0.0.42 is served, by slurmrestd and by scontrol --json=v0.0.42 (v0.0.38 was removed in 24.05)"},
	OutputPartlyExpanded: {"OutputPartlyExpanded", Release{24, 11, 0},
		"scontrol's StdOut/StdErr and the data parser's output paths come from slurm_get_job_stdout: %A %a %b %j %u %x, %% and widths expanded, what the batch step expands besides left as it is"},
	OutputExpanded: {"OutputExpanded", Release{25, 11, 0},
		"the output paths Slurm gives are wholly expanded, %N as the node's name (not its host's)"},
	SLUIDCgroups: {"SLUIDCgroups", Release{26, 5, 0},
		"cgroup/v2 names a job's directory by the job's SLUID (job_<sluid>) unless CgroupJobIdPaths=yes: the daemon finds either by the layout it reads (daemon/jobcgroup), the virtual node tests both"},
}

// String is the feature's name ("DataParserV0042").
func (f Feature) String() string { return changes[f].Name }

// Since is the first release that has the feature.
func (f Feature) Since() Release { return changes[f].Since }

// Why says what changed in that release.
func (f Feature) Why() string { return changes[f].Why }

// Has says whether release r has feature f: r is f's release or later. A release not
// known has none: it is read as the oldest release persyst is tested with, which has none
// either (TestFeatures).
func (r Release) Has(f Feature) bool {
	s := f.Since()
	return r.Known() && (r.CompareSeries(s) > 0 || (r.CompareSeries(s) == 0 && r.Micro >= s.Micro))
}

// Debian is a Debian release and the Slurm it packages.
type Debian struct {
	Suite string // "trixie"
	Slurm Release
}

// Tested are the Slurm releases persyst is tested with, oldest first: each the Slurm of a
// Debian release, in whose pristine root the tests run with persyst's package built there
// (scripts/test.sh's PERSYST_SUITES), and whose answers on a fixed set of jobs
// jobmap/testdata/slurm-<series>/ holds (scripts/record-slurm.sh). TestReleaseRecipe
// checks that each has what docs/development.md's "Adding a Slurm release" lists.
var Tested = []Debian{
	{"bookworm", Release{22, 5, 0}},
	{"trixie", Release{24, 11, 0}},
	{"forky", Release{26, 5, 0}},
}

// OldestTested and NewestTested are the first and the last of Tested.
func OldestTested() Release { return Tested[0].Slurm }

func NewestTested() Release { return Tested[len(Tested)-1].Slurm }
