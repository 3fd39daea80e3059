package uplink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/treeauth"
	"github.com/persyst/persyst/digest"
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
	Parts Parts
	// Reports gives a user the reports they may read (nil: none).
	Reports Reports
}

// Parts are a node's parts of its jobs (collectors.Peers).
type Parts interface {
	Part(job uint32) *pb.JobPartial
}

// Reports are a node daemon's job reports, given to the users who may read them
// (daemon.ReportGate).
type Reports interface {
	ReportJSON(uid uint32, job uint32) ([]byte, error)
	SamplesJSON(uid uint32, job uint32) ([]byte, error)
}

// Report returns a job's report to a MUNGE-authenticated user who may read it.
func (n *NodeServer) Report(ctx context.Context, in *pb.JobSummaryRequest) (*pb.JobSummary, error) {
	p := treeauth.PeerOf(ctx)
	switch {
	case !p.OK || p.Identity.Role != treeauth.User:
		return nil, status.Error(codes.PermissionDenied, "reports are given to users authenticated with MUNGE only")
	case n.Reports == nil:
		return nil, status.Error(codes.Unavailable, "this daemon keeps no reports")
	}
	b, err := n.Reports.ReportJSON(p.UID, in.JobId)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &pb.JobSummary{JobId: in.JobId, Nodes: []string{n.Node}, ReportJson: b}, nil
}

// Samples returns this node's samples of a job to a MUNGE-authenticated user who may read
// its report.
func (n *NodeServer) Samples(ctx context.Context, in *pb.JobSummaryRequest) (*pb.JobSummary, error) {
	p := treeauth.PeerOf(ctx)
	switch {
	case !p.OK || p.Identity.Role != treeauth.User:
		return nil, status.Error(codes.PermissionDenied, "samples are given to users authenticated with MUNGE only")
	case n.Reports == nil:
		return nil, status.Error(codes.Unavailable, "this daemon keeps no samples")
	}
	b, err := n.Reports.SamplesJSON(p.UID, in.JobId)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &pb.JobSummary{JobId: in.JobId, Nodes: []string{n.Node}, SamplesJson: b}, nil
}

// MaxSamplesMessage bounds a node's samples of a job over the network (a daemon keeps at
// most measure.DefaultSampleBytes of them, about three times that as JSON).
const MaxSamplesMessage = 64 << 20

// RemoteSamples asks the node daemon at addr for its samples of a job, as the user dial
// authenticates.
func RemoteSamples(ctx context.Context, addr string, dial grpc.DialOption, job uint32) ([]byte, error) {
	conn, err := grpc.NewClient(addr, dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxSamplesMessage)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	sum, err := pb.NewNodeClient(conn).Samples(ctx, &pb.JobSummaryRequest{JobId: job})
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.FailedPrecondition {
			return nil, errors.New(st.Message())
		}
		return nil, fmt.Errorf("the persyst daemon at %s: %w", addr, err)
	}
	return sum.SamplesJson, nil
}

// Part returns this node's part of a job.
func (n *NodeServer) Part(ctx context.Context, in *pb.JobSummaryRequest) (*pb.JobPartial, error) {
	if n.Parts == nil {
		return &pb.JobPartial{JobId: in.JobId, From: n.Node}, nil
	}
	return n.Parts.Part(in.JobId), nil
}

// SetRoutes takes the routes of the next cycle, and answers with this node's jobs' I/O
// stalls since the last call.
func (n *NodeServer) SetRoutes(ctx context.Context, rs *pb.Routes) (*pb.RoutesAck, error) {
	if n.Ship == nil {
		return &pb.RoutesAck{Error: "this daemon does not send records"}, nil
	}
	if err := n.Ship.SetRoutes(rs); err != nil {
		return &pb.RoutesAck{Error: err.Error()}, nil
	}
	return &pb.RoutesAck{Ok: true, Stalls: n.Ship.Stalls()}, nil
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

// RemoteReport asks the node daemon at addr for a job's report, as the user dial
// authenticates (treeauth, role User): `persyst report` away from the job's batch host.
func RemoteReport(ctx context.Context, addr string, dial grpc.DialOption, job uint32) (*digest.Report, error) {
	conn, err := grpc.NewClient(addr, dial)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	sum, err := pb.NewNodeClient(conn).Report(ctx, &pb.JobSummaryRequest{JobId: job})
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.FailedPrecondition {
			return nil, errors.New(st.Message())
		}
		return nil, fmt.Errorf("the persyst daemon at %s: %w", addr, err)
	}
	var r digest.Report
	if err := json.Unmarshal(sum.ReportJson, &r); err != nil {
		return nil, fmt.Errorf("report from %s: %w", addr, err)
	}
	return &r, nil
}
