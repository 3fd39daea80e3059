package uplink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
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
		if err != nil && !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("node service %s: %w", o.Listen, err)
		}
		go func() {
			if ln == nil {
				// The address is still held (a previous daemon going away): the daemon
				// serves its socket meanwhile, and binds as soon as it can.
				o.Log.Warn().Err(err).Str("listen", o.Listen).Msg("node service address in use; retrying every second")
				if ln = listenRetry(ctx, o.Listen, time.Second); ln == nil {
					return
				}
				o.Log.Info().Str("listen", o.Listen).Msg("node service listening")
			}
			if err := Serve(ctx, ln, &NodeServer{Node: o.Node, Ship: u, Parts: o.Parts, Reports: o.Reports}, serverOpts...); err != nil {
				o.Log.Error().Err(err).Msg("node gRPC service stopped")
			}
		}()
	}
	go u.Run(ctx, o.Retry)
	return u, nil
}

// listenRetry binds addr, trying again every interval until ctx is done (nil then).
func listenRetry(ctx context.Context, addr string, every time.Duration) net.Listener {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if ln, err := net.Listen("tcp", addr); err == nil {
			return ln
		}
	}
}
