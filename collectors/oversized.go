package collectors

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/exporter"
)

// countOversized is a server option that counts the pushes gRPC refuses before the
// collector reads them, a message over gRPC's size limit, as refused pushes (reason
// malformed): what a node sends is counted whoever refuses it.
func countOversized(m *exporter.Collector) grpc.ServerOption {
	return grpc.StatsHandler(oversized{m})
}

type oversized struct{ m *exporter.Collector }

type methodKey struct{}

func (oversized) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, methodKey{}, info.FullMethodName)
}

func (o oversized) HandleRPC(ctx context.Context, s stats.RPCStats) {
	end, ok := s.(*stats.End)
	if !ok || status.Code(end.Error) != codes.ResourceExhausted {
		return
	}
	if m, _ := ctx.Value(methodKey{}).(string); m == pb.Collector_Push_FullMethodName {
		o.m.Push(0, refusedMalformed)
	}
}

func (oversized) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (oversized) HandleConn(context.Context, stats.ConnStats) {}
