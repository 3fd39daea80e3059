package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/sample"
)

// sampleFiles keeps each measured job's samples on disk, so that a daemon restarted in
// the middle of a job (a crash, an upgrade) still covers the job from its start: one
// file per job, StateDir/samples/<id>.jsonl, a header line and then one sample per line,
// appended as each is read. A line cut short by a crash is skipped when the file is read
// back; so is any line that does not parse, with its file and line logged.
//
// A daemon that is killed loses nothing the kernel has accepted (the page cache
// outlives the process), so lines are not fsynced: only a node crash loses the tail, and
// it ends the job too.
//
// Bounded like the samples in memory: when a file grows past limit, it is written anew
// from the job's samples in memory, which are already held within the meter's budget
// (measure.DefaultSampleBytes, neighbouring samples merged beyond it); JSON takes about
// three times the in-memory size, so limit is four times that budget.
//
// The file of a running job stays open for appending (one write(2) per sample), at most
// maxOpenSampleFiles of them; it is closed when the file is written anew or removed.
type sampleFiles struct {
	dir   string // "": samples are not kept on disk
	limit int64
	log   zerolog.Logger
	open  *openSamples // shared by the copies of a sampleFiles
}

// openSamples are the job files kept open for appending.
type openSamples struct {
	mu    sync.Mutex
	files map[uint32]*openSample
	keys  jsonKeys // the last sample's keys, sorted
	line  []byte   // the last sample's line: its array is reused
}

// maxKeptLine bounds the line buffer kept for the next sample (a sample of a job on
// hundreds of CPUs is tens of KiB).
const maxKeptLine = 1 << 20

type openSample struct {
	fd   int
	size int64 // bytes in the file
}

// maxOpenSampleFiles bounds the job files kept open; beyond it, files are opened for
// each sample.
const maxOpenSampleFiles = 4096

// closeOpen closes job id's kept file, if any.
func (f sampleFiles) closeOpen(id uint32) {
	if f.open == nil {
		return
	}
	f.open.mu.Lock()
	defer f.open.mu.Unlock()
	if o := f.open.files[id]; o != nil {
		_ = unix.Close(o.fd)
		delete(f.open.files, id)
	}
}

// sampleHeader is a sample file's first line: which job (the registry's start of it, so
// that a reused job id never restores another job's samples) and when its measurement
// began.
type sampleHeader struct {
	Version    int       `json:"version"`
	JobID      uint32    `json:"job_id"`
	JobStarted time.Time `json:"job_started"`
	Started    time.Time `json:"started"` // the measurement's baseline
	// The job's CPUs on this node and their topology, as measured: a job whose cpuset is
	// gone by the time a restarted daemon looks is still seen on its own CPUs.
	CPUs     string           `json:"cpus"`
	Topology []sample.CPUTopo `json:"topology,omitempty"`
}

const samplesVersion = 1

func newSampleFiles(stateDir string, budget int, log zerolog.Logger) sampleFiles {
	if stateDir == "" {
		return sampleFiles{}
	}
	return sampleFiles{dir: filepath.Join(stateDir, "samples"), limit: 4 * int64(budget), log: log,
		open: &openSamples{files: map[uint32]*openSample{}}}
}

func (f sampleFiles) path(id uint32) string {
	return filepath.Join(f.dir, strconv.FormatUint(uint64(id), 10)+".jsonl")
}

// write replaces a job's file with the header and samples, atomically.
func (f sampleFiles) write(h sampleHeader, samples []sample.Sample) error {
	if f.dir == "" {
		return nil
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	h.Version = samplesVersion
	if err := enc.Encode(h); err != nil {
		return err
	}
	for _, s := range samples {
		if err := enc.Encode(s); err != nil {
			return err
		}
	}
	p := f.path(h.JobID)
	f.closeOpen(h.JobID) // the file is replaced: appends go to the new one
	tmp := p + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("samples %s: %w", tmp, err)
	}
	_, err = out.Write(b.Bytes())
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("samples %s: %w", p, err)
	}
	return nil
}

// add appends one sample to a job's file; past the limit, the file is written anew from
// all (the job's samples in memory, header first).
func (f sampleFiles) add(h sampleHeader, s sample.Sample, all func() []sample.Sample) error {
	if f.dir == "" {
		return nil
	}
	if f.open == nil {
		line, err := appendSampleJSON(make([]byte, 0, 1024), s)
		if err != nil {
			return err
		}
		return f.append(h, append(line, '\n'), all)
	}
	f.open.mu.Lock()
	line, err := appendSampleJSONKeys(f.open.line[:0], s, &f.open.keys)
	if err != nil {
		f.open.mu.Unlock()
		return err
	}
	line = append(line, '\n')
	if cap(line) <= maxKeptLine {
		f.open.line = line // the next sample's, written under the lock as this one
	}
	o := f.open.files[h.JobID]
	if o == nil && len(f.open.files) < maxOpenSampleFiles {
		// Raw system calls: a file of package os would be registered with Go's poller.
		fd, err := unix.Open(f.path(h.JobID), unix.O_WRONLY|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			var st unix.Stat_t
			if err = unix.Fstat(fd, &st); err != nil {
				_ = unix.Close(fd)
			} else {
				o = &openSample{fd: fd, size: st.Size}
				f.open.files[h.JobID] = o
			}
		}
		if err != nil {
			f.open.mu.Unlock()
			if errors.Is(err, unix.ENOENT) {
				return f.write(h, all())
			}
			return fmt.Errorf("samples %s: %w", f.path(h.JobID), err)
		}
	}
	if o == nil {
		line = bytes.Clone(line)
		f.open.mu.Unlock()
		return f.append(h, line, all)
	}
	err = writeAll(o.fd, line)
	o.size += int64(len(line))
	full := o.size > f.limit
	f.open.mu.Unlock()
	if err != nil {
		f.closeOpen(h.JobID)
		return fmt.Errorf("samples %s: %w", f.path(h.JobID), err)
	}
	if full {
		return f.write(h, all())
	}
	return nil
}

// append appends line to a job's file, opened and closed for it.
func (f sampleFiles) append(h sampleHeader, line []byte, all func() []sample.Sample) error {
	fd, err := unix.Open(f.path(h.JobID), unix.O_WRONLY|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return f.write(h, all())
	}
	if err != nil {
		return fmt.Errorf("samples %s: %w", f.path(h.JobID), err)
	}
	err = writeAll(fd, line)
	var st unix.Stat_t
	serr := unix.Fstat(fd, &st)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("samples %s: %w", f.path(h.JobID), err)
	}
	if serr == nil && st.Size > f.limit {
		return f.write(h, all())
	}
	return nil
}

// load reads a job's file back: its header and samples. A file of another job with the
// same id (its JobStarted differs from jobStarted), or none, gives no header.
func (f sampleFiles) load(id uint32, jobStarted time.Time) (*sampleHeader, []sample.Sample, error) {
	if f.dir == "" {
		return nil, nil, nil
	}
	p := f.path(id)
	in, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("samples %s: %w", p, err)
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("samples %s: not a regular file", p)
	}
	sc := bufio.NewScanner(io.LimitReader(in, 2*f.limit))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var h *sampleHeader
	var out []sample.Sample
	for n := 1; sc.Scan(); n++ {
		if n == 1 {
			var hd sampleHeader
			if err := json.Unmarshal(sc.Bytes(), &hd); err != nil || hd.Version != samplesVersion || hd.JobID != id {
				return nil, nil, fmt.Errorf("samples %s:1: not a header of job %d samples (version %d)", p, id, samplesVersion)
			}
			if !hd.JobStarted.Equal(jobStarted) {
				return nil, nil, nil // an earlier job with this id
			}
			h = &hd
			continue
		}
		var s sample.Sample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil || s.Time.IsZero() {
			f.log.Warn().Str("file", p).Int("line", n).Msg("sample line unreadable (cut short by a crash?): skipped")
			continue
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		f.log.Warn().Err(err).Str("file", p).Msg("samples read in part")
	}
	return h, out, nil
}

// remove deletes a job's file.
func (f sampleFiles) remove(id uint32) {
	if f.dir == "" {
		return
	}
	f.closeOpen(id)
	if err := os.Remove(f.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		f.log.Warn().Err(err).Uint32("job", id).Msg("samples file not removed")
	}
}

// sweep removes the files of jobs keep does not keep, and unfinished rewrites.
func (f sampleFiles) sweep(keep func(uint32) bool) {
	sweepJobFiles(f.dir, ".jsonl", keep, true, f.log)
}

// writeAll writes b to fd, retrying short writes and EINTR.
func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
