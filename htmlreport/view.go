// Package htmlreport renders a job's report as one self-contained HTML file: the digest's
// findings on top, a timeline of when each finding held, time series of the key metrics
// over the job's life with those stretches shaded, a heat map of the job's CPUs over
// time, and per-node deciles for multi-node jobs.
//
// The file needs nothing at view time: no script, no font, no network. Charts are inline
// SVG drawn here; the heat map is a PNG (a palette of 64 shades) inlined as a data URI,
// because thousands of CPUs by a day of cycles would be millions of SVG elements. Every
// text that comes from a job (node names, the digest's texts) is escaped.
//
// A View is built from the node daemons' samples (FromSamples: every metric per node, and
// per CPU for the heat map) or from a collector's database (FromCycles: the properties'
// deciles over the job's devices per cycle, no per-CPU values); Render writes it.
package htmlreport

import (
	"time"

	"github.com/persyst/persyst/digest"
)

// Limits of what is drawn: beyond them rows, columns and points are aggregated (and the
// report says so).
const (
	MaxHeatRows  = 1024 // CPUs per heat map (more are averaged in groups)
	MaxHeatCols  = 1500 // intervals per heat map
	MaxPoints    = 800  // points per line
	MaxNodeLines = 12   // nodes drawn as lines of their own; more: median and range
	MaxCharts    = 12
)

// View is what a report shows.
type View struct {
	Report digest.Report
	// Source says where the data came from ("the node daemons' samples", "collector
	// database ...").
	Source     string
	Start, End time.Time
	Lanes      []Lane
	Charts     []Chart
	Heat       *Heat
	NodeTable  *Table
	// Notes say what was aggregated or is missing.
	Notes []string
}

// Lane is a finding's stretches over the job's life.
type Lane struct {
	Key, Name string
	Color     string
	Spans     []Span
}

// Span is a stretch of time.
type Span struct{ From, To time.Time }

// Point is one value at a time (the end of an interval).
type Point struct {
	T time.Time
	V float64
}

// Line is a series of points.
type Line struct {
	Name   string
	Points []Point
}

// Band is a range over time (Lo and Hi at the same times).
type Band struct {
	Name   string
	Lo, Hi []Point
}

// Chart is one time-series chart.
type Chart struct {
	ID, Title, Unit string
	Lines           []Line
	Bands           []Band
	// Ref is a horizontal reference (a memory request), RefName says what it is.
	Ref     *float64
	RefName string
	// Shade are the lanes whose stretches are shaded on this chart.
	Shade []Lane
	Note  string
}

// Heat is the CPU × time heat map.
type Heat struct {
	Title, Unit string
	CPUs        int // the job's CPUs drawn
	GPUs        int // and its GPUs (rows after each node's CPUs)
	Rows, Cols  int // of the image
	// PerRow and PerCol are how many CPUs and intervals each pixel averages (1: none).
	PerRow, PerCol int
	// RowLabels name the first row of each node.
	RowLabels []RowLabel
	Max       float64 // the value of the darkest shade
	PNG       []byte
}

// RowLabel names the node whose CPUs start at Row.
type RowLabel struct {
	Row  int
	Node string
}

// Table is the per-node deciles table.
type Table struct {
	Columns []string // metric names with units
	Rows    []TableRow
}

// TableRow is one node's 10th percentile, median and 90th percentile per metric ("" when
// not measured).
type TableRow struct {
	Node  string
	Cells []string
}
