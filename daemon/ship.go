package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/properties"
)

// ShipConfig configures sending property records to a collector.
type ShipConfig struct {
	Addr    string        // collector address (host:port)
	Node    string        // this node's name in the records
	Timeout time.Duration // deadline of one push (default 2 s)
	// Retries bounds the attempts of one push (default 2).
	Retries int
}

// Shipper sends each job's property records of a cycle to the collector, in the
// background: the daemon's cycle never waits for it. When the collector does not answer,
// the shipper keeps the last cycle of each job and sends it once the collector is back
// (at most one cycle of a job is lost); meanwhile the daemon aggregates the job itself,
// as it always does for its digest.
type Shipper struct {
	cfg    ShipConfig
	log    zerolog.Logger
	conn   *grpc.ClientConn
	client pb.CollectorClient

	mu      sync.Mutex
	pending map[uint32]*pb.CycleRecords // newest unsent cycle per job
	wake    chan struct{}
	down    bool
}

// NewShipper prepares a connection to the collector (made lazily, on the first push).
func NewShipper(cfg ShipConfig, log zerolog.Logger) (*Shipper, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Retries <= 0 {
		cfg.Retries = 2
	}
	conn, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("collector %s: %w", cfg.Addr, err)
	}
	return &Shipper{cfg: cfg, log: log.With().Str("collector", cfg.Addr).Logger(), conn: conn,
		client: pb.NewCollectorClient(conn), pending: map[uint32]*pb.CycleRecords{}, wake: make(chan struct{}, 1)}, nil
}

// Send queues a job's records of one interval; a newer cycle of the same job replaces an
// unsent older one.
func (s *Shipper) Send(job uint32, ts time.Time, seconds float64, recs []properties.Record) {
	if len(recs) == 0 {
		return
	}
	in := &pb.CycleRecords{JobId: job, Node: s.cfg.Node, Ts: ts.Unix(), Seconds: seconds}
	for _, r := range recs {
		in.Records = append(in.Records, &pb.Record{Key: r.Key, Device: r.Device, Value: r.Value, Severity: r.Severity})
	}
	s.mu.Lock()
	if old := s.pending[job]; old != nil && old.Ts != in.Ts {
		s.log.Debug().Uint32("job", job).Int64("ts", old.Ts).Msg("unsent cycle replaced by a newer one")
	}
	s.pending[job] = in
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Pending returns how many jobs have a cycle waiting to be sent.
func (s *Shipper) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// Run sends queued cycles until ctx is done; while the collector is down it retries
// every retry interval.
func (s *Shipper) Run(ctx context.Context, retry time.Duration) {
	if retry <= 0 {
		retry = time.Second
	}
	t := time.NewTicker(retry)
	defer t.Stop()
	defer s.conn.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-t.C:
		}
		s.flush(ctx)
	}
}

// flush tries to send every pending cycle once (with bounded retries each).
func (s *Shipper) flush(ctx context.Context) {
	s.mu.Lock()
	batch := make([]*pb.CycleRecords, 0, len(s.pending))
	for _, in := range s.pending {
		batch = append(batch, in)
	}
	s.mu.Unlock()
	for _, in := range batch {
		err := s.push(ctx, in)
		s.mu.Lock()
		if err == nil {
			if cur := s.pending[in.JobId]; cur == in {
				delete(s.pending, in.JobId)
			}
			if s.down {
				s.log.Info().Msg("collector answers again")
				s.down = false
			}
		} else if !s.down {
			s.log.Warn().Err(err).Msg("collector does not answer: keeping each job's last cycle until it does")
			s.down = true
		}
		s.mu.Unlock()
		if err != nil {
			return // the collector is down: try the rest at the next retry
		}
	}
}

func (s *Shipper) push(ctx context.Context, in *pb.CycleRecords) error {
	var err error
	for i := 0; i < s.cfg.Retries; i++ {
		pctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		var ack *pb.Ack
		ack, err = s.client.Push(pctx, in)
		cancel()
		if err == nil && !ack.Ok {
			// The collector refused the data: retrying would not help.
			s.log.Error().Str("error", ack.Error).Uint32("job", in.JobId).Msg("collector refused a cycle")
			return nil
		}
		if err == nil {
			return nil
		}
	}
	return err
}
