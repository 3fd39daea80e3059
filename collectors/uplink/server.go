package uplink

import (
	"context"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"

	"github.com/persyst/persyst/collectors/pb"
)

// NodeServer is the node daemon's gRPC service in the agent tree: the frontend pushes it
// the routes of this node's jobs (which collector each job's records go to), and pings it.
// Without a collector tree it serves this node's parts of multi-node jobs to their batch
// hosts (Part). Calls are authenticated and authorized by treeauth (TreeAuth=).
type NodeServer struct {
	pb.UnimplementedNodeServer
	Node string
	Ship *Uplink
	// Parts holds this node's parts of its jobs, for their batch hosts (nil: none).
	Parts interface {
		Part(job uint32) *pb.JobPartial
	}
}

// Part returns this node's part of a job.
func (n *NodeServer) Part(ctx context.Context, in *pb.JobSummaryRequest) (*pb.JobPartial, error) {
	if n.Parts == nil {
		return &pb.JobPartial{JobId: in.JobId, From: n.Node}, nil
	}
	return n.Parts.Part(in.JobId), nil
}

// SetRoutes takes the routes of the next cycle.
func (n *NodeServer) SetRoutes(ctx context.Context, rs *pb.Routes) (*pb.Ack, error) {
	if n.Ship == nil {
		return &pb.Ack{Error: "this daemon does not send records"}, nil
	}
	if err := n.Ship.SetRoutes(rs); err != nil {
		return &pb.Ack{Error: err.Error()}, nil
	}
	return &pb.Ack{Ok: true}, nil
}

// Ping answers a heartbeat.
func (n *NodeServer) Ping(ctx context.Context, in *pb.Heartbeat) (*pb.Heartbeat, error) {
	return &pb.Heartbeat{Name: n.Node, Role: "node", Ts: in.Ts}, nil
}

// ServeNode runs the node's gRPC server on ln until ctx is done.
func Serve(ctx context.Context, ln net.Listener, n *NodeServer, opts ...grpc.ServerOption) error {
	srv := grpc.NewServer(opts...)
	pb.RegisterNodeServer(srv, n)
	stop := context.AfterFunc(ctx, srv.GracefulStop)
	defer stop()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("node server: %w", err)
	}
	return nil
}
