package daemon

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/hostfs"
)

// slurmCgroups finds a job's cgroups: in Slurm's layout on every hierarchy (slurmstepd
// itself joins only some, e.g. only freezer on v1), and those the plugin reported.
type slurmCgroups struct {
	host hostfs.FS
	node string
	log  zerolog.Logger
	// mounts are the cgroup hierarchies by key: a job's cgroup directory from an event
	// must lie under its hierarchy's mount.
	mounts   map[string]string
	cpusetV1 bool // a v1 cpuset hierarchy is mounted
	// layout is the hierarchies where Slurm's layout is, from the mount table: both
	// looked at again only when they may have changed (lookOnce).
	layout *jobcgroup.SlurmMounts
}

func newSlurmCgroups(host hostfs.FS, node string, mounts []jobcgroup.Mount, table *jobcgroup.MountTable, log zerolog.Logger) slurmCgroups {
	s := slurmCgroups{host: host, node: node, log: log, mounts: map[string]string{}, layout: jobcgroup.NewSlurmMounts(table, host, node)}
	for _, mt := range mounts {
		s.cpusetV1 = s.cpusetV1 || (!mt.IsV2 && slices.Contains(mt.Ctrls, "cpuset"))
		s.mounts[mt.Key] = mt.Path
	}
	return s
}

// find returns the job's cgroup directories by hierarchy key, and whether Slurm's layout
// holds them now, on the hierarchies mounts (nil: read the mount table).
func (s slurmCgroups) find(j *Job, mounts []jobcgroup.Mount) (map[string]string, bool) {
	cg := map[string]string{}
	var found map[string]string
	var err error
	if mounts == nil {
		found, err = jobcgroup.Find(s.host, s.node, j.UID, j.JobID)
	} else {
		found = jobcgroup.FindIn(s.host, mounts, s.node, j.UID, j.JobID)
	}
	if err == nil {
		maps.Copy(cg, found)
	}
	for k, dir := range j.Cgroups {
		if why := s.badCgroup(k, dir, j.JobID); why != "" {
			s.log.Warn().Uint32("job", j.JobID).Str("hierarchy", k).Str("cgroup", dir).Str("why", why).Msg("cgroup from an event ignored")
			continue
		}
		cg[k] = dir
	}
	return cg, len(found) > 0
}

// badCgroup says why a job's cgroup directory from an event is not taken ("" : it is): it
// must be a clean absolute path under the mount of its hierarchy, in the job's own
// cgroup (a path component job_<id>, or a SLUID below a slurmstepd scope, as Slurm
// names them).
func (s slurmCgroups) badCgroup(key, dir string, id uint32) string {
	mnt, ok := s.mounts[key]
	switch {
	case !filepath.IsAbs(dir) || filepath.Clean(dir) != dir:
		return "not a clean absolute path"
	case !ok:
		return "no such cgroup hierarchy on this node"
	case !strings.HasPrefix(dir, mnt+"/"):
		return "not under its hierarchy's mount " + mnt
	case !isJobDir(dir, id):
		return "not the job's own cgroup"
	}
	return ""
}

// isJobDir says whether dir is in job id's own cgroup: below its job_<id> directory, or on
// cgroup v2 its SLUID directory (Slurm 26.05).
func isJobDir(dir string, id uint32) bool {
	_, ok := jobcgroup.JobDir(dir, id)
	return ok
}

// cpus reads what the cpuset files of a job's cpuset and unified cgroups list.
func (s slurmCgroups) cpus(cg map[string]string) map[string]listedCPUs {
	out := map[string]listedCPUs{}
	for k, dir := range cg {
		if k == "unified" || keyHas(k, "cpuset") {
			cpus, ok, err := s.host.CgroupCPUs(dir)
			out[k] = listedCPUs{CPUs: cpus, Listed: ok, Err: err}
		}
	}
	return out
}

// hasKey says whether one of a job's cgroup hierarchies (cg's keys) has the controller ctrl.
func hasKey(cg map[string]string, ctrl string) bool {
	for k := range cg {
		if keyHas(k, ctrl) {
			return true
		}
	}
	return false
}

// keyHas says whether a v1 hierarchy's key ("cpu,cpuacct") names the controller ctrl.
func keyHas(key, ctrl string) bool { return strings.Contains(","+key+",", ","+ctrl+",") }

// ownedCgroups are persyst's own perf cgroups of jobs, made where Slurm's own cannot be
// used for perf events (cgroup v1 without a perf_event hierarchy): <mount>/<parent>/job_<id>.
type ownedCgroups struct {
	host  hostfs.FS
	mount jobcgroup.Mount // the hierarchy they are made on
	// parent is where they are made ("": nowhere, why says why).
	parent, why string
	log         zerolog.Logger
}

// newOwnedCgroups makes persyst's parent cgroup on the node's perf hierarchy.
func newOwnedCgroups(host hostfs.FS, mounts []jobcgroup.Mount, parent string, log zerolog.Logger) ownedCgroups {
	o := ownedCgroups{host: host, log: log}
	mnt, ok := jobcgroup.PerfHierarchy(mounts)
	if !ok {
		o.why = "no cgroup v2 or perf_event v1 hierarchy is mounted"
		log.Warn().Msg("perf events not measured: " + o.why)
		return o
	}
	o.mount = mnt
	dir := filepath.Join(mnt.Path, parent)
	if err := jobcgroup.Create(host, dir); err != nil {
		o.why = err.Error()
		log.Warn().Err(err).Msg("perf events not measured: cannot create persyst's cgroup")
		return o
	}
	o.parent = dir
	return o
}

// dir is persyst's perf cgroup of job id.
func (o ownedCgroups) dir(id uint32) string {
	return filepath.Join(o.parent, "job_"+strconv.FormatUint(uint64(id), 10))
}

// needed says whether a job with Slurm's cgroups cg needs one of persyst's: Slurm on
// cgroup v2 has a job directory perf can count in directly.
func (o ownedCgroups) needed(cg map[string]string) bool {
	return o.parent != "" && cg["unified"] == "" && !hasKey(cg, "perf_event")
}

// create makes job id's cgroup and returns it.
func (o ownedCgroups) create(id uint32) (string, error) {
	dir := o.dir(id)
	if err := jobcgroup.Create(o.host, dir); err != nil {
		return "", fmt.Errorf("perf cgroup of job %d: %w", id, err)
	}
	return dir, nil
}

// forJob returns persyst's perf cgroup of job j, made now if it is not there yet, when
// j needs one ("": none needed, or it could not be made: logged).
func (o ownedCgroups) forJob(j *Job) string {
	if !o.needed(j.Cgroups) {
		return ""
	}
	dir, err := o.create(j.JobID)
	if err != nil {
		o.log.Error().Err(err).Uint32("job", j.JobID).Msg("perf cgroup not created; perf events not measured for this job")
		return ""
	}
	return dir
}

// remove removes job id's cgroup (dir; "": the one an earlier daemon may have made).
func (o ownedCgroups) remove(id uint32, dir string) {
	if dir == "" && o.parent != "" {
		if st, err := os.Stat(o.host.Path(o.dir(id))); err == nil && st.IsDir() {
			dir = o.dir(id)
		}
	}
	if dir == "" {
		return
	}
	if err := jobcgroup.Remove(o.host, o.mount.Path, dir, 2*time.Second); err != nil {
		o.log.Warn().Err(err).Uint32("job", id).Msg("persyst cgroup not removed")
	}
}

// sweep removes the cgroups an earlier daemon left for jobs that are not running. The
// directories are listed before the running jobs are read, so that a job that starts
// meanwhile keeps its own.
func (o ownedCgroups) sweep(running func() map[uint32]bool) {
	ents, err := os.ReadDir(o.host.Path(o.parent))
	if err != nil {
		return
	}
	run := running()
	for _, e := range ents {
		id, err := strconv.ParseUint(strings.TrimPrefix(e.Name(), "job_"), 10, 32)
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "job_") || err != nil || run[uint32(id)] {
			continue
		}
		dir := filepath.Join(o.parent, e.Name())
		if err := jobcgroup.Remove(o.host, o.mount.Path, dir, time.Second); err != nil {
			o.log.Warn().Err(err).Msg("stale persyst cgroup not removed")
		} else {
			o.log.Info().Str("cgroup", dir).Msg("removed stale persyst cgroup")
		}
	}
}

// lookOnce returns the hierarchies a cycle looks for jobs' cgroups on: asked of the mount
// table at most once a cycle, when a job's cgroups are looked for, and only those where
// Slurm's layout is.
func (s slurmCgroups) lookOnce() func() []jobcgroup.Mount {
	var mounts []jobcgroup.Mount
	return func() []jobcgroup.Mount {
		if mounts != nil {
			return mounts
		}
		var err error
		if mounts, err = s.layout.Mounts(); err != nil {
			s.log.Debug().Err(err).Msg("cgroup mounts not read")
			return nil // read again by the next job's look
		}
		// Where no hierarchy has Slurm's layout yet, mounts is empty (not nil): not
		// looked for again this cycle. A hierarchy slurmd mounts later is seen once the
		// kernel's poll or MaxAge says so, a layout it makes within LayoutMaxAge; a
		// job's own start waits for neither (the opener reads the mounts afresh).
		return mounts
	}
}

// present says whether job j's cgroups are there: in Slurm's layout, or the directories
// its events named (26.05's SLUID names, which the layout alone does not give).
func (s slurmCgroups) present(j *Job, mounts []jobcgroup.Mount) bool {
	cg, found := s.find(j, mounts)
	if found {
		return true
	}
	for _, dir := range cg {
		if st, err := os.Stat(s.host.Path(dir)); err == nil && st.IsDir() {
			return true
		}
	}
	return false
}
