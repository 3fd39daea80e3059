package sitesim

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	_ "modernc.org/sqlite" // the databases are read directly, read-only
)

// Stored is what a site in a box's databases hold of what its nodes sent.
type Stored struct {
	Cycles  map[[2]int64]bool // (job id, cycle timestamp) pairs with results
	Reports int               // final reports kept (the frontend's database)
	// Marked are rows that hold what hostile nodes sent: cycles whose largest value is
	// Marker, jobs of Marker seconds (a forged report).
	Marked int
}

// ReadStored reads the collectors' and the frontend's databases (paths; the frontend's
// has "front" in its name), read-only.
func ReadStored(ctx context.Context, paths []string) (Stored, error) {
	s := Stored{Cycles: map[[2]int64]bool{}}
	for _, path := range paths {
		if err := s.read(ctx, path); err != nil {
			return s, fmt.Errorf("%s: %w", path, err)
		}
	}
	return s, nil
}

func (s *Stored) read(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT j.job_id, c.ts FROM cycles c JOIN jobs j ON j.key = c.job`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var k [2]int64
		if err := rows.Scan(&k[0], &k[1]); err != nil {
			rows.Close()
			return err
		}
		s.Cycles[k] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if strings.Contains(path, "front") {
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM reports`).Scan(&s.Reports); err != nil {
			return err
		}
	}
	var cycles, jobs int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM cycles WHERE max >= ?`, Marker).Scan(&cycles); err != nil {
		return err
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM jobs WHERE seconds = ?`, Marker).Scan(&jobs); err != nil {
		return err
	}
	s.Marked += cycles + jobs
	return nil
}

// Lost counts the (job, cycle) pairs the nodes sent and how many of them no database
// holds, leaving out each job's last skip cycles (in flight when the nodes stopped).
func Lost(sent map[uint32][]int64, stored map[[2]int64]bool, skip int) (total, lost int) {
	for job, tss := range sent {
		if len(tss) <= skip {
			continue
		}
		for _, ts := range tss[:len(tss)-skip] {
			total++
			if !stored[[2]int64{int64(job), ts}] {
				lost++
			}
		}
	}
	return total, lost
}

// Totals are a hostile run's counts over every kind.
func (h HostileStats) Totals() (sent, refused, taken int64) {
	for _, k := range HostileKinds {
		sent, refused, taken = sent+h.Sent[k], refused+h.Refused[k], taken+h.Taken[k]
	}
	return sent, refused, taken
}
