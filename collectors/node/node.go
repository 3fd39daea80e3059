// Package node joins a node daemon to the other agents: its gRPC service (routes from
// the frontend, its parts of jobs for their batch hosts, reports for users), its peers
// (the other nodes' daemons, for whole multi-node digests without a tree) and, when one
// is configured, the collector tree.
package node

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/collectors"
	"github.com/persyst/persyst/collectors/treeauth"
	"github.com/persyst/persyst/collectors/uplink"
	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/properties"
)

// Options say how a node daemon joins.
type Options struct {
	Node   string
	Engine *properties.Engine
	Conf   config.Config
	// Auth authenticates the node's calls and its service (treeauth.Load).
	Auth *treeauth.Tree
	// Listen is the service's address ("": every address, at Conf.NodePort, unless
	// TreeAuth=none or NodePort=0: then there is no service).
	Listen string
	// JobMap gives the jobs' nodes and the nodes' addresses.
	JobMap *jobmap.Map
	// Reports gives users their reports (daemon.ReportGate).
	Reports uplink.Reports
	// Retry is how often records kept while a collector is down are sent again.
	Retry time.Duration
	Log   zerolog.Logger
}

// Start serves the node's gRPC service and returns the daemon's uplink: the peers, and
// through them the tree when there is one. Everything stops when ctx is done.
func Start(ctx context.Context, o Options) (*collectors.Peers, error) {
	listen := o.Listen
	if listen == "" && o.Conf.NodePort > 0 && o.Auth.Mode() != treeauth.None {
		listen = ":" + strconv.Itoa(o.Conf.NodePort)
	}
	dial, err := o.Auth.DialOption(treeauth.Node)
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(o.Conf.NodePort)
	peers, err := collectors.NewPeers(collectors.PeersConfig{Node: o.Node, Engine: o.Engine, Dial: dial, Log: o.Log,
		Nodes: func(ctx context.Context, job uint32) ([]string, error) {
			j, err := o.JobMap.Job(ctx, strconv.FormatUint(uint64(job), 10))
			if err != nil {
				return nil, err
			}
			return j.Nodes, nil
		},
		Addrs: func(ctx context.Context) (map[string]string, error) {
			addrs, err := o.JobMap.NodeAddrs(ctx)
			for n, a := range addrs {
				addrs[n] = net.JoinHostPort(a, port)
			}
			return addrs, err
		}})
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, peers.Close)
	up, err := uplink.Start(ctx, uplink.Options{Collector: o.Conf.Collector, Listen: listen, Node: o.Node,
		Auth: o.Auth, Parts: peers, Reports: o.Reports, Retry: o.Retry, Log: o.Log})
	if err != nil {
		peers.Close()
		return nil, err
	}
	if up != nil {
		peers.UseTree(up)
	}
	return peers, nil
}
