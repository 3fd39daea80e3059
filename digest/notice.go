package digest

import "time"

// The reasons a running job is told it holds resources it does not use (the daemon's
// notices, NoticeIdleGPUAfter and NoticeIdleCPUAfter).
const (
	NoticeGPUIdle = "gpu_idle" // every GPU of the job ran nothing
	NoticeCPUIdle = "cpu_idle" // the job's CPUs were busy less than a tenth of the time
)

// NoticeSubject is what a notice's reason says of the job, as its user and the site's
// admins read it ("": a reason persyst does not know).
func NoticeSubject(reason string) string {
	switch reason {
	case NoticeGPUIdle:
		return "holds GPUs that run nothing"
	case NoticeCPUIdle:
		return "holds CPUs that do almost nothing"
	}
	return ""
}

// NoticeRefresh is how often a job's batch host says again that a reason it told still
// holds; a notice not said again for three times as long no longer stands (its job
// ended, or its node stopped sending).
const NoticeRefresh = 5 * time.Minute

// Notice is what a running job's batch host told the job's user, and whether it still
// holds: the site's view lists the running jobs that hold what they do not use. The
// batch host sends it up the tree when it tells the user, again while the reason holds
// (Seen), and once more when it stops holding (Until).
type Notice struct {
	JobID  uint32
	Node   string // the batch host
	Reason string // NoticeGPUIdle or NoticeCPUIdle
	// Since is when the reason began to hold; Told when the user was told; Seen the end
	// of the latest interval in which it held; Until when it stopped holding (zero: it
	// still held at Seen).
	Since, Told, Seen, Until time.Time
}
