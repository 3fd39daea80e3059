package phases

import (
	"math"
	"sort"
	"time"
)

// NodePhases are a job's phases and interference on one of its nodes: a node's part of
// the job, for comparing it with the others'.
type NodePhases struct {
	Node         string        `json:"node"`
	NCPUs        int           `json:"ncpus"`
	Phases       []Phase       `json:"phases"`
	Interference *Interference `json:"interference,omitempty"`
}

// Alikeness is how alike a multi-node job's nodes behaved (SPMDiness, after González):
// at each moment, the behaviour most of its nodes had is the job's; a node's alikeness is
// the share of its judged time it behaved so.
type Alikeness struct {
	// Nodes were compared (those with phases); Score is their mean alikeness (1: all
	// behaved alike all along).
	Nodes int     `json:"nodes"`
	Score float64 `json:"score"`
	// Unlike are the nodes that behaved unlike most for more than UnlikeAbove of their
	// time, least alike first.
	Unlike []UnlikeNode `json:"unlike,omitempty"`
}

// UnlikeNode is a node that behaved unlike the job's other nodes.
type UnlikeNode struct {
	Node  string  `json:"node"`
	Alike float64 `json:"alike"` // share of its judged time it behaved as most nodes did
	// Stretch is its longest stretch unlike most nodes; Traits what it did then, Others
	// what most nodes did.
	Stretch Stretch `json:"stretch"`
	Traits  Traits  `json:"traits"`
	Others  Traits  `json:"others"`
	NCPUs   int     `json:"ncpus"`
	// OthersNCPUs are the CPUs of the node whose phase stands for most nodes'.
	OthersNCPUs int `json:"others_ncpus"`
}

// The comparison's numbers.
const (
	// Alike is the distance (normalised units, as Find's) within which two nodes' phases
	// are one behaviour: between EpsMin and EpsMax, as phases are means of many
	// intervals, steadier than single intervals.
	Alike = 0.3
	// UnlikeAbove: a node unlike most nodes for more than this share of its time is named.
	UnlikeAbove = 0.2
	// MinCompared nodes are the fewest for a "most": with two, neither is the odd one.
	MinCompared = 3
	// compareBins is the number of moments the job's time is compared at.
	compareBins = 500
)

// behaviour is one behaviour common to nodes: the phases (node, index) taken as alike.
type behaviour struct {
	centroid []float64
	secs     float64
}

// Compare says how alike nodes behaved over the job: each node's phase is taken as one of
// the job's behaviours (the nearest one found so far, the longest phases taken first,
// whose centroid is within Alike of it; else a new one); at each of compareBins moments
// over the job's time, the behaviour most nodes had (more than half of those judged
// then) is the job's; nodes unlike it for more than UnlikeAbove of their judged moments
// are named. nil with fewer than MinCompared nodes with phases.
func Compare(nodes []NodePhases) *Alikeness {
	var with []NodePhases
	for _, n := range nodes {
		if len(n.Phases) > 0 {
			with = append(with, n)
		}
	}
	if len(with) < MinCompared {
		return nil
	}
	sort.Slice(with, func(i, j int) bool { return with[i].Node < with[j].Node })
	label := behaviourLabels(with)
	c := judgedTime(with)
	if c.span <= 0 {
		return nil
	}
	beh, phs := c.moments(with, label)
	// Made here, not in majority: they do not outlive Compare, and stay off the heap.
	most, mostNode := make([]int, compareBins), make([]int, compareBins)
	majority(beh, most, mostNode)
	out := &Alikeness{Nodes: len(with)}
	scored := 0
	for i, n := range with {
		l := likenessOf(beh[i], most)
		if l.judged == 0 {
			continue
		}
		share := float64(l.alike) / float64(l.judged)
		out.Score += share
		scored++
		if 1-share <= UnlikeAbove || l.runLen == 0 {
			continue
		}
		// What it and most nodes did in the middle of its longest stretch unlike them.
		mid := l.runFrom + l.runLen/2
		u := UnlikeNode{Node: n.Node, Alike: share, NCPUs: n.NCPUs,
			Stretch: Stretch{From: c.start(l.runFrom), To: c.start(l.runFrom + l.runLen)},
			Traits:  n.Phases[phs[i][mid]].Traits}
		if o := mostNode[mid]; o >= 0 {
			u.Others, u.OthersNCPUs = with[o].Phases[phs[o][mid]].Traits, with[o].NCPUs
		}
		out.Unlike = append(out.Unlike, u)
	}
	if scored > 0 {
		out.Score /= float64(scored)
	}
	sort.SliceStable(out.Unlike, func(a, b int) bool { return out.Unlike[a].Alike < out.Unlike[b].Alike })
	return out
}

// behaviourLabels labels each node's phases with the job's behaviour each is taken as
// (label[node][phase]): the largest phases are placed first, each in the nearest
// behaviour found so far whose centroid is within Alike of its own, else in a new one.
func behaviourLabels(with []NodePhases) [][]int {
	type ref struct{ node, phase int }
	var refs []ref
	for i, n := range with {
		for k := range n.Phases {
			refs = append(refs, ref{i, k})
		}
	}
	sort.SliceStable(refs, func(a, b int) bool {
		return with[refs[a].node].Phases[refs[a].phase].Seconds > with[refs[b].node].Phases[refs[b].phase].Seconds
	})
	label := make([][]int, len(with))
	for i, n := range with {
		label[i] = make([]int, len(n.Phases))
	}
	var bs []behaviour
	for _, r := range refs {
		ph := with[r.node].Phases[r.phase]
		best, bd := -1, math.Inf(1)
		for b := range bs {
			if d := centroidDist(ph.Centroid, bs[b].centroid); d < bd {
				best, bd = b, d
			}
		}
		if best < 0 || bd > Alike {
			bs = append(bs, behaviour{centroid: ph.Centroid})
			best = len(bs) - 1
		}
		bs[best].secs += ph.Seconds
		label[r.node][r.phase] = best
	}
	return label
}

// clock is the job's time cut into compareBins equal moments, from its nodes' first
// judged time over span.
type clock struct {
	from time.Time
	span time.Duration
}

// judgedTime is the clock of the time the nodes' phases cover, from the first to the
// last.
func judgedTime(with []NodePhases) clock {
	var from, to time.Time
	for _, n := range with {
		for _, ph := range n.Phases {
			for _, st := range ph.Stretches {
				if from.IsZero() || st.From.Before(from) {
					from = st.From
				}
				if st.To.After(to) {
					to = st.To
				}
			}
		}
	}
	return clock{from: from, span: to.Sub(from)}
}

// start is when moment b begins (b = compareBins: when the last ends).
func (c clock) start(b int) time.Time {
	return c.from.Add(time.Duration(float64(b) / float64(compareBins) * float64(c.span)))
}

// mid is the middle of moment b, where the nodes are compared.
func (c clock) mid(b int) time.Time {
	return c.from.Add(time.Duration((float64(b) + 0.5) / float64(compareBins) * float64(c.span)))
}

// moments says what each node did at each moment: beh[node][moment] the behaviour, and
// phs[node][moment] the phase it was in (both -1: not judged then).
func (c clock) moments(with []NodePhases, label [][]int) (beh, phs [][]int) {
	beh = make([][]int, len(with))
	phs = make([][]int, len(with))
	for i, n := range with {
		beh[i], phs[i] = make([]int, compareBins), make([]int, compareBins)
		for b := 0; b < compareBins; b++ {
			beh[i][b], phs[i][b] = -1, -1
			t := c.mid(b)
			for k, ph := range n.Phases {
				if ph.covers(t) {
					beh[i][b], phs[i][b] = label[i][k], k
					break
				}
			}
		}
	}
	return beh, phs
}

// majority sets the job's behaviour at each moment (most[moment]): the one more than
// half the nodes judged then had, with at least MinCompared judged; -1: none. mostNode is
// the first node that had it (-1: none).
func majority(beh [][]int, most, mostNode []int) {
	for b := 0; b < compareBins; b++ {
		count := map[int]int{}
		judged := 0
		for i := range beh {
			if l := beh[i][b]; l >= 0 {
				count[l]++
				judged++
			}
		}
		most[b], mostNode[b] = -1, -1
		for l, c := range count {
			if 2*c > judged && judged >= MinCompared {
				most[b] = l
			}
		}
		for i := range beh {
			if most[b] >= 0 && beh[i][b] == most[b] {
				mostNode[b] = i
				break
			}
		}
	}
}

// likeness is how a node's behaviour compares with the job's: judged counts the moments
// when both had one, alike those when they were the same; its longest run of moments
// unlike the job's (none: runLen 0) starts at runFrom.
type likeness struct {
	alike, judged   int
	runFrom, runLen int
}

// likenessOf compares a node's behaviour at each moment (beh) with the job's (most).
func likenessOf(beh, most []int) likeness {
	l := likeness{runFrom: -1}
	from := -1 // the start of the current unlike run
	for b := 0; b <= compareBins; b++ {
		unlike := b < compareBins && most[b] >= 0 && beh[b] >= 0 && beh[b] != most[b]
		if b < compareBins && most[b] >= 0 && beh[b] >= 0 {
			l.judged++
			if !unlike {
				l.alike++
			}
		}
		switch {
		case unlike && from < 0:
			from = b
		case !unlike && from >= 0:
			if b-from > l.runLen {
				l.runFrom, l.runLen = from, b-from
			}
			from = -1
		}
	}
	return l
}

// covers says whether t lies in one of the phase's stretches.
func (p Phase) covers(t time.Time) bool {
	for _, st := range p.Stretches {
		if !t.Before(st.From) && t.Before(st.To) {
			return true
		}
	}
	return false
}

// centroidDist is the distance of two centroids; features one of them lacks count as 0
// (as Find takes a sparse feature).
func centroidDist(a, b []float64) float64 {
	s := 0.0
	for i := 0; i < max(len(a), len(b)); i++ {
		var x, y float64
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		d := x - y
		s += d * d
	}
	return math.Sqrt(s)
}
