package uplink

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/collectors/treeauth"
	"google.golang.org/grpc"
)

// Options say how a node daemon joins the agent tree.
type Options struct {
	// Collector receives the records of jobs the frontend has not routed (host:port;
	// "" keeps them on the node).
	Collector string
	// Listen is the address of the node's route service, where the frontend pushes
	// routes ("" : no frontend).
	Listen string
	Node   string
	// Auth authenticates the node in the tree (nil: plain connections, no checks).
	Auth *treeauth.Tree
	// Parts are this node's parts of its jobs, served to their batch hosts (nil: none).
	Parts Parts
	// Reports gives users their jobs' reports (nil: none).
	Reports Reports
	// Retry is how often cycles kept while a collector is down are tried again.
	Retry time.Duration
	Log   zerolog.Logger
}

// Start joins the tree when the options name a collector or a route service: it starts
// sending in the background and serves the route service, both until ctx is done. It
// returns nil (and no error) when there is no tree to join.
func Start(ctx context.Context, o Options) (*Uplink, error) {
	if o.Collector == "" && o.Listen == "" {
		return nil, nil
	}
	var dial grpc.DialOption
	var serverOpts []grpc.ServerOption
	if o.Auth != nil {
		var err error
		// The node sends to collectors, sync agents and the frontend (aggregation points).
		if dial, err = o.Auth.DialOption(treeauth.Collector, treeauth.Sync, treeauth.Frontend); err != nil {
			return nil, err
		}
		if serverOpts, err = o.Auth.ServerOptions(); err != nil {
			return nil, err
		}
	}
	u, err := New(Config{Addr: o.Collector, Node: o.Node, Dial: dial}, o.Log)
	if err != nil {
		return nil, err
	}
	if o.Listen != "" {
		ln, err := net.Listen("tcp", o.Listen)
		if err != nil {
			return nil, fmt.Errorf("route service %s: %w", o.Listen, err)
		}
		go func() {
			if err := Serve(ctx, ln, &NodeServer{Node: o.Node, Ship: u, Parts: o.Parts, Reports: o.Reports}, serverOpts...); err != nil {
				o.Log.Error().Err(err).Msg("node gRPC service stopped")
			}
		}()
	}
	go u.Run(ctx, o.Retry)
	return u, nil
}
