package daemon

import (
	"encoding/json"

	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/properties"
)

// partWhy says, for the batch host of a multi-node job, why this node has no part of it
// (its records): in the words of the batch host's coverage line, and whether the part
// was too short to judge, which is no gap in the job's coverage. "" when the job is not
// known here.
func partWhy(reg *Registry, meters *meterSet, engine *properties.Engine) func(job uint32) (string, bool) {
	startup := float64(properties.DefaultStartupSeconds)
	if engine != nil {
		startup = engine.Startup().Seconds()
	}
	return func(id uint32) (string, bool) {
		j := reg.Job(id)
		if j == nil {
			return "", false
		}
		if j.Persyst == wire.Off {
			return "the job opted out there", false
		}
		var job interface{ Judged() float64 }
		if jm := meters.get(id); jm != nil {
			if _, pj := jm.now(); pj != nil {
				job = pj
			}
		}
		switch {
		case job != nil && job.Judged() <= 0:
			// What the properties judged, not the time measured less the start-up: under
			// load the start-up read comes late and holds more than the start-up.
			return "its part ended within its start-up, which is never judged", true
		case job != nil:
			return "its persyst daemon measured the job but kept no part of it", false
		case j.Ended != nil && j.Ended.Sub(j.Started).Seconds() <= 2*startup:
			return "its part ended before it could be measured", true
		case j.Ended != nil:
			return "its persyst daemon could not measure the job (its log says why)", false
		}
		return "its persyst daemon has not measured the job yet", false
	}
}

// partPhases returns this node's phases and interference of a job as JSON
// (phases.NodePhases), for its part (nil: not measured here, or nothing judged).
func partPhases(node string, meters *meterSet) func(job uint32) []byte {
	return func(id uint32) []byte {
		jm := meters.get(id)
		if jm == nil {
			return nil
		}
		_, pj := jm.now()
		if pj == nil {
			return nil
		}
		np := pj.NodePhases(node)
		if np == nil {
			return nil
		}
		b, err := json.Marshal(np)
		if err != nil {
			return nil
		}
		return b
	}
}
