package jobmap

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
)

// syntheticJobs renders a slurmrestd v0.0.38 /jobs answer (simulated: a machine this size
// is not available) for n running jobs on a cluster of nodes nodes, each node with 48
// cores. size draws a job's node count.
func syntheticJobs(n, nodes int, size func(*rand.Rand) int, seed int64) []byte {
	r := rand.New(rand.NewSource(seed))
	var b bytes.Buffer
	b.WriteString(`{"meta":{"Slurm":{"version":{"major":22,"micro":8,"minor":5},"release":"22.05.8"}},"errors":[],"jobs":[`)
	for i := 0; i < n; i++ {
		size := size(r)
		first := r.Intn(nodes - size + 1)
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"job_id":%d,"array_job_id":0,"array_task_id":null,"name":"job%d","user_name":"u%d","user_id":%d,"group_id":100,`+
			`"partition":"batch","job_state":"RUNNING","nodes":"n[%05d-%05d]","batch_host":"n%05d","current_working_directory":"/home/u%d",`+
			`"standard_output":"/home/u%d/out-%%j.txt","standard_error":"","submit_time":1,"start_time":2,"end_time":3,"time_limit":60,`+
			`"job_resources":{"nodes":"n[%05d-%05d]","allocated_cores":%d,"allocated_hosts":%d,"allocated_nodes":[`,
			i+1, i, i%500, 1000+i%500, first, first+size-1, first, i%500, i%500, first, first+size-1, size*48, size)
		for k := 0; k < size; k++ {
			if k > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"nodename":"n%05d","cpus_used":0,"memory_used":0,"memory_allocated":0,"sockets":{"0":{"cores":{"0":"allocated","1":"allocated"}},"1":{"cores":{"0":"allocated","1":"allocated"}}}}`, first+k)
		}
		b.WriteString(`]}}`)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// BenchmarkRunning measures Map.Running through the generated slurmrestd client on
// synthetic answers of 10,000 running jobs on a 20,000-node machine, up to 1,000 nodes
// each. Served over a unix socket, so transfer, decoding, hostlist expansion and
// conversion all count.
func BenchmarkRunning(b *testing.B) {
	// mix: 90% one-node jobs, 10% log-uniform from 2 to 1,000 nodes (a heavy tail, as on
	// real machines; about 15 nodes per job). stress: sizes cubed-uniform up to 1,000
	// (about 124 nodes per job: 1.24 M node allocations, far more than a 20,000-node
	// machine holds; the worst case).
	mix := func(r *rand.Rand) int {
		if r.Float64() < 0.9 {
			return 1
		}
		return int(math.Round(math.Exp(math.Log(2) + r.Float64()*(math.Log(1000)-math.Log(2)))))
	}
	stress := func(r *rand.Rand) int { return 1 + int(999*r.Float64()*r.Float64()*r.Float64()) }
	for _, tc := range []struct {
		name        string
		jobs, nodes int
		size        func(*rand.Rand) int
	}{{"mix", 10000, 20000, mix}, {"stress", 10000, 20000, stress}} {
		b.Run(fmt.Sprintf("%s,jobs=%d,max_nodes=1000", tc.name, tc.jobs), func(b *testing.B) {
			body := syntheticJobs(tc.jobs, tc.nodes, tc.size, 1)
			sock := filepath.Join(b.TempDir(), "restd.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				b.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.HandleFunc("/slurm/v0.0.38/jobs", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Write(body)
			})
			mux.HandleFunc("/slurm/v0.0.38/nodes", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(`{"errors":[],"nodes":[]}`))
			})
			srv := &http.Server{Handler: mux}
			go srv.Serve(ln)
			defer srv.Close()
			rs, err := NewRestSource(RestConfig{URL: "unix:" + sock})
			if err != nil {
				b.Fatal(err)
			}
			m := NewMap(rs, NewCLISource(nil, 0, zerolog.Nop()), zerolog.Nop())
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			b.ResetTimer()
			nodes := 0
			for i := 0; i < b.N; i++ {
				jobs, err := m.Running(context.Background())
				if err != nil || len(jobs) != tc.jobs {
					b.Fatalf("Running = %d jobs, %v", len(jobs), err)
				}
				nodes = 0
				for _, j := range jobs {
					nodes += len(j.Nodes)
				}
			}
			b.ReportMetric(float64(nodes)/float64(tc.jobs), "nodes/job")
			b.ReportMetric(float64(len(body))/1e6, "MB/answer")
		})
	}
}
