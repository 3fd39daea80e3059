package collectors

import (
	"math"
	"testing"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/properties/propertiestest"
	"github.com/persyst/persyst/sample"
)

// TestJobEnergyOverNodes: a multi-node job's energy is each node's latest (its totals so
// far: a cycle lost loses none of it, an older cycle arriving late changes nothing),
// summed over the nodes, whether one collector holds the job or its parts are merged;
// what is not an energy total of zero or more, or a node a part does not hold, is not
// taken.
func TestJobEnergyOverNodes(t *testing.T) {
	eng := propertiestest.Engine(t)
	push := func(v *jobView, node string, ts int64, totals map[string]float64) {
		v.add(&pb.CycleRecords{JobId: 9, Node: node, Ts: ts, Seconds: 60,
			Records: []*pb.Record{{Key: "cpu_user_pct", Device: "node", Value: 50}},
			Energy:  &pb.NodeEnergy{Node: "whoever", Ts: ts, Totals: totals, How: "RAPL (powercap): the node's, the job had it alone"}})
	}
	pkg := func(j float64) map[string]float64 { return map[string]float64{sample.EnergyPkgJoules: j} }

	whole := newJobView()
	push(whole, "a", 60, pkg(100))
	push(whole, "a", 180, pkg(330)) // the cycle at 120 was lost
	push(whole, "a", 120, pkg(220)) // late: older than what is kept
	push(whole, "b", 60, pkg(50))
	push(whole, "c", 60, map[string]float64{sample.EnergyPkgJoules: math.NaN()})
	push(whole, "d", 60, map[string]float64{sample.EnergyPkgJoules: -5})
	push(whole, "e", 60, map[string]float64{"cpu_user_seconds": 7})
	r := whole.report(9, eng)
	if e := r.Energy; e == nil || e.Joules != 380 || e.NodesCounted != 2 || len(e.ByNode) != 2 || e.ByNode["a"].Joules != 330 {
		t.Fatalf("one collector's view of nodes a-e: energy %+v, want a's 330 J and b's 50 J", e)
	}
	if e := r.Energy; e.Whole(r.NNodes) {
		t.Errorf("energy of 2 of %d nodes said to be the whole job's", r.NNodes)
	}

	// The job split over two collectors: their parts merged.
	va, vb := newJobView(), newJobView()
	push(va, "a", 60, pkg(100))
	push(va, "a", 120, pkg(220))
	push(vb, "b", 60, pkg(50))
	pa, pbart := va.partial(9, "ca"), vb.partial(9, "cb")
	// A part that names a node it does not hold: that node's energy is not taken.
	pbart.NodeEnergy = append(pbart.NodeEnergy, &pb.NodeEnergy{Node: "z", Ts: 60, Totals: pkg(1e9)})
	m, err := MergePartials(eng, 9, []*pb.JobPartial{pa, pbart})
	if err != nil {
		t.Fatal(err)
	}
	if e := m.Energy; e == nil || e.Joules != 270 || e.NodesCounted != 2 || !e.Whole(m.NNodes) || e.ByNode["z"] != nil {
		t.Errorf("merged parts of nodes a and b: energy %+v over %d nodes, want 270 J of both", e, m.NNodes)
	}
}
