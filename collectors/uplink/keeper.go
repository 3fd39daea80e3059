package uplink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

	// A report the keeper could not take (it is down, restarting, or cannot reach the job
	// map) is tried again after retryMin, doubling up to retryMax, for retryFor in all; one
	// it refused is not.
	retryMin, retryMax, retryFor time.Duration
}

// Keeper retries: a frontend restarted, or down for a quarter of an hour (its host
// rebooted), still gets every report; the queue (MaxKeepQueue) bounds what waits.
const (
	keepRetryMin = 2 * time.Second
	keepRetryMax = time.Minute
	keepRetryFor = 15 * time.Minute
)

// errRefused is a keeper's answer that it will not keep a report: trying again would not
// help.
var errRefused = errors.New("refused by the keeper")

// keptReport is a job's final report, or a notice its user was told, waiting to be
// sent to the keeper.
type keptReport struct {
	job    uint32
	json   []byte
	notice *pb.JobNotice // set: a notice, not a report
}

// MaxKeepQueue bounds the final reports waiting for the keeper; beyond it the newest is
// dropped (and logged): a site view misses a report rather than the daemon growing.
const MaxKeepQueue = 256

func newKeeper(node string, cl *clients, log zerolog.Logger) *keeper {
	return &keeper{node: node, clients: cl, log: log, queue: make(chan keptReport, MaxKeepQueue),
		retryMin: keepRetryMin, retryMax: keepRetryMax, retryFor: keepRetryFor}
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
	k.enqueue(keptReport{job: job, json: b})
}

// keepNotice queues what a running job's user was told for the keeper; without a keeper
// it is not sent.
func (k *keeper) keepNotice(n digest.Notice) {
	if k.address() == "" {
		return
	}
	k.enqueue(keptReport{job: n.JobID, notice: &pb.JobNotice{JobId: n.JobID, Node: k.node, Reason: n.Reason,
		Since: unixOf(n.Since), Told: unixOf(n.Told), Seen: unixOf(n.Seen), Until: unixOf(n.Until)}})
}

// unixOf is a time in a message: Unix seconds, 0 for none.
func unixOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

// enqueue queues r, or drops it (logged) when too many wait.
func (k *keeper) enqueue(r keptReport) {
	select {
	case k.queue <- r:
	default:
		k.log.Warn().Uint32("job", r.job).Int("queued", MaxKeepQueue).Str("what", r.what()).Msg("not sent to the keeper: too many waiting")
	}
}

// what names what r carries, for the log.
func (r keptReport) what() string {
	if r.notice != nil {
		return "notice"
	}
	return "final report"
}

// tryFor is how long r is tried: a notice no longer than until its batch host says it
// again.
func (k *keeper) tryFor(r keptReport) time.Duration {
	if r.notice != nil {
		return min(k.retryFor, digest.NoticeRefresh)
	}
	return k.retryFor
}

// run sends the final reports to the keeper, in order, until ctx is done: each is tried
// until the keeper takes or refuses it, or for retryFor (the reports behind it wait: the
// keeper is one).
func (k *keeper) run(ctx context.Context) {
	for {
		var r keptReport
		select {
		case <-ctx.Done():
			return
		case r = <-k.queue:
		}
		err := errors.New("no keeper")
		first, wait := time.Now(), k.retryMin
		for tries := 1; ; tries++ {
			addr := k.address() // the frontend may have moved meanwhile
			if addr != "" {
				err = k.send(ctx, addr, r)
			}
			if err == nil || errors.Is(err, errRefused) || ctx.Err() != nil || time.Since(first) >= k.tryFor(r) {
				if err != nil && ctx.Err() == nil {
					k.log.Warn().Err(err).Uint32("job", r.job).Str("keeper", addr).Int("tries", tries).Msg(r.what() + " not kept by the tree")
				}
				break
			}
			if tries == 1 {
				k.log.Info().Err(err).Uint32("job", r.job).Str("keeper", addr).Msg(r.what() + " not taken yet; trying again")
			}
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			wait = min(2*wait, k.retryMax)
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
	var ack *pb.Ack
	if r.notice != nil {
		ack, err = cl.KeepNotice(pctx, r.notice)
	} else {
		ack, err = cl.KeepReport(pctx, &pb.JobSummary{JobId: r.job, Nodes: []string{k.node}, ReportJson: r.json})
	}
	switch {
	case err != nil:
		return err
	case !ack.Ok:
		return fmt.Errorf("%w: %s", errRefused, ack.Error)
	}
	return nil
}
