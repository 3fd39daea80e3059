package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/digest"
)

// reportStore keeps each job's digest report as JSON under the state directory, for
// `persyst report`; a report lives as long as the registry keeps its job.
type reportStore struct {
	dir string // "" : reports are kept in memory only
}

func newReportStore(stateDir string) reportStore {
	if stateDir == "" {
		return reportStore{}
	}
	return reportStore{dir: filepath.Join(stateDir, "reports")}
}

func (s reportStore) path(id uint32) string {
	return filepath.Join(s.dir, strconv.FormatUint(uint64(id), 10)+".json")
}

// save writes a job's report atomically.
func (s reportStore) save(id uint32, r *digest.Report) error {
	if s.dir == "" {
		return nil
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(s.dir, 0o700); err != nil { // made by an older daemon, 0755
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	p := s.path(id)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

var errNoReport = errors.New("no report on this node")

// load reads a job's report.
func (s reportStore) load(id uint32) (*digest.Report, error) {
	b, err := os.ReadFile(s.path(id))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || s.dir == "" {
			return nil, fmt.Errorf("job %d: %w", id, errNoReport)
		}
		return nil, err
	}
	var r digest.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read %s: %w", s.path(id), err)
	}
	return &r, nil
}

// sweep removes the reports of jobs keep does not keep.
func (s reportStore) sweep(keep func(uint32) bool, log zerolog.Logger) {
	sweepJobFiles(s.dir, ".json", keep, false, log)
}

// sweepJobFiles removes the files <job id><suffix> of dir whose jobs keep does not keep,
// and (others) every other file there.
func sweepJobFiles(dir, suffix string, keep func(uint32) bool, others bool, log zerolog.Logger) {
	if dir == "" {
		return
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		id, err := strconv.ParseUint(strings.TrimSuffix(name, suffix), 10, 32)
		ours := err == nil && strings.HasSuffix(name, suffix)
		if (ours && keep(uint32(id))) || (!ours && !others) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			log.Warn().Err(err).Str("file", filepath.Join(dir, name)).Msg("old file not removed")
		}
	}
}
