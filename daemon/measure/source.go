package measure

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/persyst/persyst/daemon/measure/procio"
	"github.com/persyst/persyst/sample"
)

// A Source reads one kind of counter for one job: perf events, cgroup statistics, the
// processes' I/O, node counters, ... Each is one file of this package and one line of
// the registry (sources, below), as node_exporter's collectors are.
//
// Read is called once per read of the job's meter, never concurrently. The first call
// (r.Reason == sample.Start) is the baseline: a counter source records where its counters
// stand and adds nothing. Later calls add to r.Sample the increase of each counter since
// the previous call (gauges: the state now), and name every metric the source could not
// read, with the reason, through r.NotMeasured: a metric is never reported as 0 because
// it could not be read. The error reports failures worth a log line; what could be read
// is kept either way.
type Source interface {
	Read(r *Read) error
	Close() error
}

// PerCPUSource is a Source with values per CPU of the job (in Sample.CPU): it names them
// once, when opened; ok is false when it has none for this job.
type PerCPUSource interface {
	Source
	CPUMetrics() (names []string, ok bool)
}

// Registration describes a source.
type Registration struct {
	Name string
	// Default says whether the source is on unless the admin turns it off (Env.Enable).
	Default bool
	// Metrics are the metrics the source produces in Sample.Job (perf events, named by
	// the node's catalog, are not listed). A metric of sample's vocabulary keeps its
	// definition there; a new metric is defined here, by its source.
	Metrics []sample.Metric
	// New opens the source for one job.
	New func(env *Env, spec *Spec) (Source, error)
}

// sources is the registry, in reading order.
var sources = []Registration{
	perfRegistration,
	syscallsRegistration,
	cgroupRegistration,
	procRegistration,
	netRegistration,
	infinibandRegistration,
	energyRegistration,
	gpuRegistration,
	schedstatRegistration,
	suspendRegistration,
	outsideRegistration,
}

// Sources lists the registered sources.
func Sources() []Registration { return append([]Registration(nil), sources...) }

// Metrics returns every metric a registered source produces, by name: the vocabulary's
// definitions and the sources' own.
func Metrics() []sample.Metric {
	var out []sample.Metric
	for _, r := range sources {
		out = append(out, r.Metrics...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// vocabulary returns the vocabulary's definitions of names, for a registration.
func vocabulary(names ...string) []sample.Metric {
	out := make([]sample.Metric, 0, len(names))
	for _, n := range names {
		m, ok := sample.Lookup(n)
		if !ok {
			panic("measure: " + n + " is not in sample's vocabulary")
		}
		out = append(out, m)
	}
	return out
}

// enabled reports whether the source named name is on in env.
func (env *Env) enabled(r Registration) bool {
	if on, ok := env.Enable[r.Name]; ok {
		return on
	}
	return r.Default
}

// CheckEnable reports the first name in enable that is not a registered source; lines,
// if given, say where in file each was set (persyst.conf's MetricSource.<name>=).
func CheckEnable(enable map[string]bool, file string, lines map[string]int) error {
	known := map[string]bool{}
	var names []string
	for _, r := range sources {
		known[r.Name] = true
		names = append(names, r.Name)
	}
	bad := ""
	for n := range enable {
		if !known[n] && (bad == "" || lines[n] < lines[bad] || lines[n] == lines[bad] && n < bad) {
			bad = n
		}
	}
	if bad == "" {
		return nil
	}
	err := fmt.Errorf("no metric source %q (the sources: %s)", bad, strings.Join(names, ", "))
	if line, ok := lines[bad]; ok && file != "" {
		return fmt.Errorf("%s:%d: MetricSource.%s: %w", file, line, bad, err)
	}
	return err
}

// Read is one read of a job's meter, as a source sees it.
type Read struct {
	Reason sample.Reason
	// Sample receives the source's values.
	Sample *sample.Sample
	// Spec is the job's current spec (its cgroups may change while it runs).
	Spec *Spec
	env  *Env

	notes map[string]string
	// lister lists the job's processes with kept descriptors (nil: ListProcs).
	lister *procio.Lister
	// freezer says whether the job is frozen.
	freezer *Freezer
	// cgroupGone: a cgroup directory of the job's statistics was gone at this read.
	cgroupGone bool
	pids       []int
	pidsErr    error
	havePIDs   bool
	excl       bool
	exclWhy    string
	haveExcl   bool
}

// NotMeasured records that metric has no value in this read, and why.
func (r *Read) NotMeasured(metric, why string) { r.notes[metric] = why }

// errNoProcCgroup is PIDs' answer when the job has no process list.
var errNoProcCgroup = errors.New("no cgroup to list the job's processes")

// PIDs returns the job's processes now: those of Spec.ProcCgroup and its descendants,
// plus Spec.ExtraPIDs. They are listed once per read, whichever sources ask.
func (r *Read) PIDs() ([]int, error) {
	if r.havePIDs {
		return r.pids, r.pidsErr
	}
	r.havePIDs = true
	r.pids, r.pidsErr = r.listPIDs()
	return r.pids, r.pidsErr
}
