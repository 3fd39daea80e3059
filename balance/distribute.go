package balance

// distribute is Algorithm 2 (DistributeLoadOnCollectors) for one job with
// at least two nodes. It returns the destination collector (agent index) of
// every node, the collector slots that received load in choice order, and
// whether one of them ended above l_max.
func (b *balancer) distribute(nodes []int32, la int) (dest []int32, used []int32, over bool) {
	lj := len(nodes) * la
	nc := min((lj+b.lmax-1)/b.lmax, len(b.t.collectors))
	sp := &spread{b: b, nodes: nodes, la: la, byCol: b.groupBySlot(nodes), dest: make([]int32, len(nodes)), left: len(nodes)}
	for k, a := range nodes {
		sp.dest[k] = -1
		b.histAdd(a, 1)
	}
	for iter := 0; iter < nc && sp.left > 0; iter++ {
		s := b.findBest()
		if s < 0 {
			break
		}
		sp.take(s)
	}
	sp.placeRest()
	for _, s := range sp.chosen {
		b.avail[s] = true
	}
	used, over = b.usedSlots(sp.dest, sp.chosen)
	return sp.dest, used, over
}

// groupBySlot returns the job's positions grouped by the collector slot of each
// node's own collector (a counting sort over slots), so that a collector chosen for
// the job finds its own children in the job at once. For the current epoch it
// leaves slotStamp marking the slots with children in the job, and slotStart and
// slotCount giving each one's range in the result.
func (b *balancer) groupBySlot(nodes []int32) []int32 {
	t := b.t
	b.epoch++
	var slots []int32
	for _, a := range nodes {
		s := t.colSlot[t.parent[a]]
		if b.slotStamp[s] != b.epoch {
			b.slotStamp[s] = b.epoch
			b.slotCount[s] = 0
			slots = append(slots, s)
		}
		b.slotCount[s]++
	}
	pos := int32(0)
	for _, s := range slots {
		b.slotStart[s] = pos
		pos += b.slotCount[s]
		b.slotCount[s] = 0
	}
	byCol := make([]int32, len(nodes))
	for k, a := range nodes {
		s := t.colSlot[t.parent[a]]
		byCol[b.slotStart[s]+b.slotCount[s]] = int32(k)
		b.slotCount[s]++
	}
	return byCol
}

// usedSlots is the collector slots of chosen that received at least one node
// (dest), in choice order, and whether one of them is above l_max. A collector
// chosen for its distance may get none of the job when others took it all.
func (b *balancer) usedSlots(dest, chosen []int32) (used []int32, over bool) {
	t := b.t
	b.epoch++
	for _, d := range dest {
		b.slotStamp[t.colSlot[d]] = b.epoch
	}
	for _, s := range chosen {
		if b.slotStamp[s] == b.epoch {
			used = append(used, s)
			if b.load[s] > b.lmax {
				over = true
			}
		}
	}
	return used, over
}

// spread is one job while distribute places its nodes on collectors.
type spread struct {
	b      *balancer
	nodes  []int32 // the job's nodes (agent indices)
	la     int     // load per node
	byCol  []int32 // positions in nodes, grouped by their collector (groupBySlot)
	dest   []int32 // per position: the destination collector, -1 while unassigned
	chosen []int32 // collector slots chosen for the job, in choice order
	left   int     // nodes not yet assigned
}

// take chooses collector slot s for the job, removing it from C*, and gives it
// those of its own children in the job that are still unassigned, as long as it
// has room under l_max: a node's data then goes no further than its own collector.
func (sp *spread) take(s int32) {
	b := sp.b
	sp.chosen = append(sp.chosen, s)
	b.avail[s] = false
	if b.slotStamp[s] != b.epoch {
		return // none of the collector's children are in the job
	}
	for _, k := range sp.byCol[b.slotStart[s] : b.slotStart[s]+b.slotCount[s]] {
		if sp.dest[k] < 0 && b.load[s]+sp.la <= b.lmax {
			sp.assign(int(k), s)
		}
	}
}

// assign sends the node at position k of the job to collector slot s.
func (sp *spread) assign(k int, s int32) {
	b := sp.b
	sp.dest[k] = b.t.collectors[s]
	b.load[s] += sp.la
	b.histAdd(sp.nodes[k], -1)
	sp.left--
}

// placeRest places the load the chosen collectors did not take as their own
// children (Algorithm 2 lines 22–25): each node goes to the least-loaded chosen
// collector. With OverflowSpill, a node that would push that collector above
// l_max makes the job acquire another collector first, while one has room.
func (sp *spread) placeRest() {
	b := sp.b
	for k := 0; k < len(sp.nodes) && sp.left > 0; k++ {
		if sp.dest[k] >= 0 {
			continue
		}
		for {
			best := sp.leastLoaded(sp.nodes[k])
			if b.overflow == OverflowSpill && b.load[best]+sp.la > b.lmax && b.minAvailLoad() <= b.lmax-sp.la {
				sp.take(b.findBest())
				if sp.dest[k] >= 0 {
					break // the new collector took this node as its child
				}
				continue
			}
			sp.assign(k, best)
			break
		}
	}
}

// leastLoaded is the chosen collector slot with the least load; ties go to the
// one nearest to node a in the tree, then to the one chosen first.
func (sp *spread) leastLoaded(a int32) int32 {
	b, t := sp.b, sp.b.t
	best, bestD := int32(-1), int32(0)
	for _, s := range sp.chosen {
		switch {
		case best < 0 || b.load[s] < b.load[best]:
			best, bestD = s, t.dist(t.collectors[s], a)
		case b.load[s] == b.load[best]:
			if d := t.dist(t.collectors[s], a); d < bestD {
				best, bestD = s, d
			}
		}
	}
	return best
}
