package uplink

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/collectors/mtls"
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
	TLS    mtls.Files
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
	dial, err := o.TLS.DialOption()
	if err != nil {
		return nil, err
	}
	u, err := New(Config{Addr: o.Collector, Node: o.Node, Dial: dial}, o.Log)
	if err != nil {
		return nil, err
	}
	if o.Listen != "" {
		serverOpt, err := o.TLS.ServerOption()
		if err != nil {
			return nil, err
		}
		ln, err := net.Listen("tcp", o.Listen)
		if err != nil {
			return nil, fmt.Errorf("route service %s: %w", o.Listen, err)
		}
		go func() {
			if err := Serve(ctx, ln, &NodeServer{Node: o.Node, Ship: u}, serverOpt); err != nil {
				o.Log.Error().Err(err).Msg("node gRPC service stopped")
			}
		}()
	}
	go u.Run(ctx, o.Retry)
	return u, nil
}
