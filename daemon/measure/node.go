package measure

import (
	"github.com/persyst/persyst/daemon/measure/netstat"
	"github.com/persyst/persyst/sample"
)

// Node counters (network interfaces, InfiniBand ports) count for the whole
// node, whatever runs on it: they are attributed to a job only over intervals in which it
// had the node to itself (Spec.Exclusive) at both ends.
var (
	netRegistration = Registration{Name: "netdev", Default: true, Metrics: vocabulary(netNames...),
		New: func(env *Env, _ *Spec) (Source, error) { return &nodeSource{names: netNames, read: readNetDev}, nil }}
	infinibandRegistration = Registration{Name: "infiniband", Default: true, Metrics: vocabulary(ibNames...),
		New: func(env *Env, _ *Spec) (Source, error) { return &nodeSource{names: ibNames, read: readInfiniBand}, nil }}
)

var (
	netNames = []string{sample.NetRxBytes, sample.NetTxBytes, sample.NetRxPackets, sample.NetTxPackets}
	ibNames  = []string{sample.IBRxBytes, sample.IBTxBytes, sample.IBRxPackets, sample.IBTxPackets}
)

// nodeSource reads a group of node counters: read returns their cumulative values now
// and notes those it could not read.
type nodeSource struct {
	names     []string
	read      func(r *Read, cur map[string]float64) error
	prev      map[string]float64
	exclusive bool // the previous read had the node to itself
}

func (n *nodeSource) Read(r *Read) error {
	if excl, why := r.Exclusive(); !excl {
		for _, name := range n.names {
			r.NotMeasured(name, why)
		}
		n.prev, n.exclusive = nil, false
		return nil
	}
	cur := map[string]float64{}
	err := n.read(r, cur)
	if n.exclusive && n.prev != nil {
		for k, v := range cur {
			if p, ok := n.prev[k]; ok {
				r.Sample.Job[k] = max(v-p, 0)
			}
		}
	} else {
		for _, name := range n.names {
			if _, ok := r.notes[name]; !ok {
				r.NotMeasured(name, "the job got the node to itself only at this read")
			}
		}
	}
	n.prev, n.exclusive = cur, true
	return err
}

func (n *nodeSource) Close() error { return nil }

func readNetDev(r *Read, cur map[string]float64) error {
	c, err := netstat.ReadNet(r.env.Host, nil)
	if err != nil {
		for _, n := range netNames {
			r.NotMeasured(n, err.Error())
		}
		return err
	}
	cur[sample.NetRxBytes], cur[sample.NetTxBytes] = float64(c.RxBytes), float64(c.TxBytes)
	cur[sample.NetRxPackets], cur[sample.NetTxPackets] = float64(c.RxPackets), float64(c.TxPackets)
	return nil
}

func readInfiniBand(r *Read, cur map[string]float64) error {
	ports, err := netstat.ReadInfiniBand(r.env.Host)
	switch {
	case err != nil:
		for _, n := range ibNames {
			r.NotMeasured(n, err.Error())
		}
		return err
	case len(ports) == 0:
		for _, n := range ibNames {
			r.NotMeasured(n, "no InfiniBand ports on this node")
		}
		return nil
	}
	for _, p := range ports {
		if p.Saturated {
			for _, n := range ibNames {
				r.NotMeasured(n, "InfiniBand 32-bit counters saturated")
			}
			return nil
		}
	}
	for _, p := range ports {
		cur[sample.IBRxBytes] += float64(p.RcvBytes)
		cur[sample.IBTxBytes] += float64(p.XmitBytes)
		cur[sample.IBRxPackets] += float64(p.RcvPackets)
		cur[sample.IBTxPackets] += float64(p.XmitPackets)
	}
	return nil
}

// Exclusive says whether the job has the node to itself now and, if not, why node
// counters are not attributed to it; asked once per read.
func (r *Read) Exclusive() (bool, string) {
	if !r.haveExcl {
		r.haveExcl = true
		switch {
		case r.Spec.Exclusive == nil:
			r.exclWhy = "node counters are not attributed to this job"
		case !r.Spec.Exclusive():
			r.exclWhy = "the node is shared with other jobs"
		default:
			r.excl = true
		}
	}
	return r.excl, r.exclWhy
}
