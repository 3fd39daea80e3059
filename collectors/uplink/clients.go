package uplink

import (
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/persyst/persyst/collectors/pb"
)

// clients are the uplink's connections to the agents of the tree (collectors, sync
// agents, the frontend), one per address, made on first use, with their lock.
type clients struct {
	dial  grpc.DialOption // nil: plain
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // agent address → connection
}

func newClients(dial grpc.DialOption) *clients {
	return &clients{dial: dial, conns: map[string]*grpc.ClientConn{}}
}

// client returns the client of the agent at addr, connecting on first use.
func (c *clients) client(addr string) (pb.CollectorClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	conn, ok := c.conns[addr]
	if !ok {
		var err error
		dial := c.dial
		if dial == nil {
			dial = grpc.WithTransportCredentials(insecure.NewCredentials())
		}
		if conn, err = grpc.NewClient(addr, dial); err != nil {
			return nil, fmt.Errorf("collector %s: %w", addr, err)
		}
		c.conns[addr] = conn
	}
	return pb.NewCollectorClient(conn), nil
}

// close closes every connection.
func (c *clients) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
}
