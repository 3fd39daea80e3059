package uplink

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/digest"
)

// keeper sends the jobs' final reports to the tree's keeper (Routes.keeper: the
// frontend), in the background: it holds the keeper's address, as the frontend last sent
// it, with its lock, and the queue of the reports waiting.
type keeper struct {
	node    string // this node's name in the reports' messages
	clients *clients
	log     zerolog.Logger

	mu    sync.Mutex
	addr  string // where final reports go, "" : nowhere
	queue chan keptReport
}

// keptReport is a job's final report waiting to be sent to the keeper.
type keptReport struct {
	job  uint32
	json []byte
}

// MaxKeepQueue bounds the final reports waiting for the keeper; beyond it the newest is
// dropped (and logged): a site view misses a report rather than the daemon growing.
const MaxKeepQueue = 256

func newKeeper(node string, cl *clients, log zerolog.Logger) *keeper {
	return &keeper{node: node, clients: cl, log: log, queue: make(chan keptReport, MaxKeepQueue)}
}

// set takes the keeper's address from the frontend's routes.
func (k *keeper) set(addr string) {
	k.mu.Lock()
	k.addr = addr
	k.mu.Unlock()
}

// address is the keeper's address, "" : none.
func (k *keeper) address() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.addr
}

// keep queues a job's final report for the keeper; without a keeper it is not sent.
func (k *keeper) keep(job uint32, r digest.Report) {
	if k.address() == "" {
		return
	}
	b, err := json.Marshal(r)
	if err != nil {
		k.log.Error().Err(err).Uint32("job", job).Msg("final report not kept")
		return
	}
	select {
	case k.queue <- keptReport{job, b}:
	default:
		k.log.Warn().Uint32("job", job).Int("queued", MaxKeepQueue).Msg("final report not sent to the keeper: too many waiting")
	}
}

// run sends the final reports to the keeper, each tried for a while, until ctx is done.
func (k *keeper) run(ctx context.Context) {
	for {
		var r keptReport
		select {
		case <-ctx.Done():
			return
		case r = <-k.queue:
		}
		addr := k.address()
		err := errors.New("no keeper")
		for try := 0; try < 3 && addr != ""; try++ {
			if err = k.send(ctx, addr, r); err == nil || ctx.Err() != nil {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(try+1) * 2 * time.Second):
			}
		}
		if err != nil {
			k.log.Warn().Err(err).Uint32("job", r.job).Str("keeper", addr).Msg("final report not kept by the tree")
		}
	}
}

// send sends one final report to the keeper at addr, once.
func (k *keeper) send(ctx context.Context, addr string, r keptReport) error {
	cl, err := k.clients.client(addr)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ack, err := cl.KeepReport(pctx, &pb.JobSummary{JobId: r.job, Nodes: []string{k.node}, ReportJson: r.json})
	switch {
	case err != nil:
		return err
	case !ack.Ok:
		return errors.New(ack.Error)
	}
	return nil
}
