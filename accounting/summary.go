// Package accounting keeps a compact summary of a job's digest in Slurm's accounting, in
// the job's AdminComment, so that `sacct -j JOBID -o AdminComment` shows it and `persyst
// report --sacct JOBID` renders the digest again for any past job, on any machine with
// sacct, long after the daemons forgot the job.
//
// # The summary
//
// Encode makes a token "persyst:v2:" followed by the summary: JSON with short keys,
// compressed (zlib) and encoded as unpadded lowercase base32, so that it holds no space,
// comma, quote or '=' that a reader of sacct's output could split on, and survives the
// database path (sacctmgr 22.05 lowercases the AdminComment it sets). Decode also reads
// version 1 tokens (base64url, case-sensitive). It holds what the text
// digest shows: the job, its nodes and CPUs, how long it was measured, how it ended and
// what happened to it, what the digest does not cover, what it says beside the findings
// (Slurm's suspensions, the time lost to work outside the job, the nodes unlike the
// rest, the site's I/O episodes, its notes), and its findings (key, name, unit,
// deciles rounded to 4 significant digits, threshold, share of the job and severities).
// Recommendations are not kept: Decode takes them from the property catalog of the
// persyst that reads the summary. A token is at most MaxToken bytes: findings beyond
// those that fit are counted, not kept (the text says "... and N more").
//
// # Merging with a site's AdminComment
//
// A site may use AdminComment for its own notes. Merge never removes or changes them:
//   - an empty AdminComment becomes the token;
//   - one that holds a persyst token already is left alone (the summary is written once);
//   - otherwise the token is appended after a space, if the whole stays within MaxField
//     bytes; if it would not, nothing is written (ErrNoRoom).
//
// Find reads the token out of an AdminComment wherever it stands.
package accounting

import (
	"bytes"
	"compress/zlib"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// Prefix starts every summary token; Version is the summary's version.
const (
	Prefix  = "persyst:v2:"
	Version = 2
	// prefixV1 starts the tokens of version 1 (base64url), which Decode still reads.
	prefixV1 = "persyst:v1:"
	// MaxToken bounds a token; MaxField bounds the AdminComment persyst leaves behind
	// (with a site's own text before the token).
	MaxToken = 2048
	MaxField = 4096
)

// ErrNoRoom: the site's AdminComment leaves no room for the token.
var ErrNoRoom = errors.New("the job's AdminComment leaves no room for persyst's summary")

// ErrPresent: the job's AdminComment holds a persyst summary already.
var ErrPresent = errors.New("the job's AdminComment holds a persyst summary already")

type summary struct {
	V        int              `json:"v"`
	Job      uint32           `json:"j"`
	ArrayJob uint32           `json:"aj,omitempty"`
	Task     *uint32          `json:"at,omitempty"`
	Nodes    []string         `json:"n"`
	NNodes   int              `json:"nn"`
	CPUs     int              `json:"c"`
	GPUs     int              `json:"g,omitempty"`
	GPUModel string           `json:"gm,omitempty"` // vendor first, at most maxModel bytes
	Slices   int              `json:"gs,omitempty"`
	Start    int64            `json:"t0"`
	End      int64            `json:"t1"`
	Seconds  float64          `json:"s"`
	Samples  int              `json:"sm"`
	Short    bool             `json:"sh,omitempty"`
	MinSecs  float64          `json:"ms,omitempty"`
	Startup  bool             `json:"so,omitempty"`
	Findings []finding        `json:"f"`
	More     int              `json:"more,omitempty"`
	Coverage *coverage        `json:"cov,omitempty"`
	EndState *digest.EndState `json:"es,omitempty"`
	Events   []event          `json:"ev,omitempty"`
	Energy   *energy          `json:"en,omitempty"`
	around
}

// energy is the job's digest.Energy: joules by part, how they were measured (whether a
// share of a shared node's is in it), the first node counted and how many (where more
// than one), the site's CO2 factor.
type energy struct {
	Parts     map[string]float64 `json:"p"`
	How       string             `json:"h,omitempty"`
	Estimate  bool               `json:"e,omitempty"`
	Nodes     []string           `json:"n,omitempty"`
	Counted   int                `json:"nc,omitempty"`
	CO2PerKWh float64            `json:"c,omitempty"`
}

// maxEnergyParts bounds the parts a decoded summary takes.
const maxEnergyParts = 8

func energyOf(e *digest.Energy) *energy {
	if e == nil {
		return nil
	}
	out := &energy{Parts: map[string]float64{}, How: clipText(e.How, 200), Estimate: e.Estimate, CO2PerKWh: e.CO2PerKWh, Counted: e.NodesCounted}
	for k, v := range e.Parts {
		out.Parts[k] = round4(v)
	}
	for i, n := range e.Nodes {
		if i == 1 {
			break
		}
		out.Nodes = append(out.Nodes, clipText(n, 64))
	}
	return out
}

// report puts the energy back, with its total, kWh and emissions.
func (e *energy) report() (*digest.Energy, error) {
	if len(e.Parts) > maxEnergyParts {
		return nil, fmt.Errorf("persyst summary: energy of %d parts, at most %d", len(e.Parts), maxEnergyParts)
	}
	out := &digest.Energy{Parts: e.Parts, How: e.How, Estimate: e.Estimate, Nodes: e.Nodes, NodesCounted: max(e.Counted, 0)}
	for k, v := range e.Parts {
		if !(v >= 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("persyst summary: energy part %q: %v joules", k, v)
		}
		out.Joules += v
	}
	out.KWh = out.Joules / 3.6e6
	if e.CO2PerKWh > 0 && e.CO2PerKWh <= 5000 {
		out.CO2PerKWh, out.CO2Grams = e.CO2PerKWh, out.KWh*e.CO2PerKWh
	}
	return out, nil
}

// around is what the digest says beside its findings: whether it was the job's code or
// the system (Report.Suspended, Interference, Alike, Episodes) and its notes. A summary
// too large for MaxToken loses the nodes unlike the rest and the episodes before any
// finding, the time lost to others only after every finding.
type around struct {
	Suspended        []gap                `json:"su,omitempty"`
	Interference     *phases.Interference `json:"in,omitempty"`
	InterferenceNode string               `json:"inn,omitempty"`
	Alike            *phases.Alikeness    `json:"al,omitempty"`
	Episodes         []episode            `json:"ep,omitempty"`
	Notes            []event              `json:"no,omitempty"`
}

type episode struct {
	From    int64 `json:"f"`
	To      int64 `json:"t"`
	Jobs    int   `json:"j"`
	Stalled int   `json:"s"`
}

// Bounds of the around facts a summary keeps (the digest shows fewer, and counts the rest).
const (
	maxSuspended = 32
	maxUnlike    = 16
	maxEpisodes  = 16
)

type finding struct {
	Key       string    `json:"k"`
	ID        string    `json:"i"`
	Name      string    `json:"n"`
	Unit      string    `json:"u,omitempty"`
	Domain    string    `json:"dm,omitempty"`
	Deciles   []float64 `json:"d,omitempty"`
	Threshold *float64  `json:"th,omitempty"`
	Share     float64   `json:"sh"`
	Mean      float64   `json:"sv"`
	Max       float64   `json:"mx"`
	Score     float64   `json:"sc,omitempty"`
}

type coverage struct {
	Elapsed  float64 `json:"e"`
	Measured float64 `json:"m"`
	Gaps     []gap   `json:"g,omitempty"`
	Missing  []node  `json:"mn,omitempty"`
	Late     bool    `json:"l,omitempty"`
}

type gap struct {
	From int64  `json:"f"`
	To   int64  `json:"t"`
	Why  string `json:"w"`
}

type node struct {
	Node string `json:"n"`
	Why  string `json:"w"`
}

type event struct {
	Key  string `json:"k"`
	Text string `json:"t"`
	Rec  string `json:"r,omitempty"`
}

// round4 keeps 4 significant digits.
func round4(v float64) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	if err != nil {
		return v
	}
	return r
}

// maxModel bounds the GPUs' model a summary keeps.
const maxModel = 80

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8Start(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// Encode makes a job report's summary token (at most MaxToken bytes).
func Encode(r digest.Report) (string, error) {
	s := summary{V: Version, Job: r.JobID, ArrayJob: r.ArrayJobID, Task: r.ArrayTaskID, Nodes: r.Nodes, NNodes: r.NNodes,
		CPUs: r.CPUs, GPUs: r.GPUs, GPUModel: clipText(r.GPUModel, maxModel), Slices: r.GPUSlices, Seconds: round4(r.Seconds), Samples: r.Samples, Short: r.Short, MinSecs: r.MinSeconds, Startup: r.StartupOnly,
		EndState: r.EndState, Findings: []finding{}}
	if !r.Start.IsZero() {
		s.Start, s.End = r.Start.Unix(), r.End.Unix()
	}
	for _, f := range r.Findings {
		d := make([]float64, len(f.Deciles))
		for i, v := range f.Deciles {
			d[i] = round4(v)
		}
		var th *float64
		if f.Threshold != nil {
			v := round4(*f.Threshold)
			th = &v
		}
		s.Findings = append(s.Findings, finding{Key: f.Key, ID: f.ID, Name: clipText(f.Name, 80), Unit: f.Unit, Domain: string(f.Domain),
			Deciles: d, Threshold: th, Share: round4(f.TimeShare), Mean: round4(f.MeanSeverity), Max: round4(f.MaxSeverity), Score: round4(f.Score)})
	}
	if c := r.Coverage; c != nil {
		s.Coverage = &coverage{Elapsed: round4(c.Elapsed), Measured: round4(c.Measured), Late: c.Late}
		for i, g := range c.Gaps {
			if i == 8 {
				break
			}
			s.Coverage.Gaps = append(s.Coverage.Gaps, gap{From: g.From.Unix(), To: g.To.Unix(), Why: clipText(g.Why, 120)})
		}
		for i, m := range c.Missing {
			if i == 16 {
				break
			}
			s.Coverage.Missing = append(s.Coverage.Missing, node{Node: clipText(m.Node, 64), Why: clipText(m.Why, 120)})
		}
	}
	for _, e := range r.Events {
		s.Events = append(s.Events, event{Key: e.Key, Text: clipText(e.Text, 300), Rec: clipText(e.Recommendation, 300)})
	}
	s.around = aroundOf(r)
	s.Energy = energyOf(r.Energy)
	// Findings beyond what fits are counted, from the least important.
	for {
		tok, err := encode(s)
		if err != nil {
			return "", err
		}
		if len(tok) <= MaxToken {
			return tok, nil
		}
		switch {
		case s.Alike != nil || len(s.Episodes) > 0:
			s.Alike, s.Episodes = nil, nil
		case len(s.Findings) > 0:
			s.Findings = s.Findings[:len(s.Findings)-1]
			s.More++
		case s.Coverage != nil && len(s.Coverage.Gaps)+len(s.Coverage.Missing) > 0:
			s.Coverage.Gaps, s.Coverage.Missing = nil, nil
		case len(s.Events) > 0:
			s.Events = s.Events[:len(s.Events)-1]
		case s.Interference != nil || len(s.Suspended)+len(s.Notes) > 0:
			s.around = around{}
		default:
			return "", fmt.Errorf("summary of job %d: %d bytes, more than %d", r.JobID, len(tok), MaxToken)
		}
	}
}

// aroundOf is what r says beside its findings, bounded (and its texts clipped).
func aroundOf(r digest.Report) around {
	var a around
	for i, g := range r.Suspended {
		if i == maxSuspended {
			break
		}
		a.Suspended = append(a.Suspended, gap{From: g.From.Unix(), To: g.To.Unix()})
	}
	if in := r.Interference; in != nil && len(in.Causes) > 0 {
		c := *in
		c.Causes = c.Causes[:min(len(c.Causes), 3)]
		a.Interference = &c
		a.InterferenceNode = clipText(r.InterferenceNode, 64)
		if a.InterferenceNode == "" {
			a.InterferenceNode = clipText(r.PhasesNode, 64)
		}
	}
	if al := r.Alike; al != nil && len(al.Unlike) > 0 {
		c := *al
		c.Unlike = c.Unlike[:min(len(c.Unlike), maxUnlike)]
		for i := range c.Unlike {
			c.Unlike[i].Node = clipText(c.Unlike[i].Node, 64)
		}
		a.Alike = &c
	}
	for i, e := range r.Episodes {
		if i == maxEpisodes {
			break
		}
		a.Episodes = append(a.Episodes, episode{From: e.From.Unix(), To: e.To.Unix(), Jobs: e.Jobs, Stalled: e.Stalled})
	}
	for _, n := range r.Notes {
		a.Notes = append(a.Notes, event{Key: n.Key, Text: clipText(n.Text, 300), Rec: clipText(n.Recommendation, 300)})
	}
	return a
}

// report puts the around facts back into r.
func (a around) report(r *digest.Report) {
	for _, g := range a.Suspended {
		r.Suspended = append(r.Suspended, sample.Gap{From: time.Unix(g.From, 0).UTC(), To: time.Unix(g.To, 0).UTC()})
	}
	r.Interference, r.InterferenceNode, r.Alike = a.Interference, a.InterferenceNode, a.Alike
	for _, e := range a.Episodes {
		r.Episodes = append(r.Episodes, episodes.Episode{From: time.Unix(e.From, 0).UTC(), To: time.Unix(e.To, 0).UTC(), Jobs: e.Jobs, Stalled: e.Stalled})
	}
	for _, n := range a.Notes {
		r.Notes = append(r.Notes, digest.Event{Key: n.Key, Text: n.Text, Recommendation: n.Rec})
	}
}

func encode(s summary) (string, error) {
	js, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	w, _ := zlib.NewWriterLevel(&b, zlib.BestCompression)
	_, _ = w.Write(js)
	if err := w.Close(); err != nil {
		return "", err
	}
	return Prefix + lowerBase32.EncodeToString(b.Bytes()), nil
}

// lowerBase32 is RFC 4648 base32 in lowercase, unpadded: case changes do not matter to it.
var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// maxJSON bounds a decoded summary (a token of MaxToken bytes inflates to far less).
const maxJSON = 1 << 20

// Decode reads a summary token back into a report; recommendation gives a property's
// recommendation by key (nil: none).
func Decode(tok string, recommendation func(key string) string) (digest.Report, error) {
	var raw []byte
	var err error
	version := Version
	switch {
	case strings.HasPrefix(tok, Prefix):
		raw, err = lowerBase32.DecodeString(strings.ToLower(tok[len(Prefix):]))
	case strings.HasPrefix(tok, prefixV1):
		version = 1
		raw, err = base64.RawURLEncoding.DecodeString(tok[len(prefixV1):])
	case strings.HasPrefix(tok, "persyst:v"):
		v, _, _ := strings.Cut(strings.TrimPrefix(tok, "persyst:"), ":")
		return digest.Report{}, fmt.Errorf("a persyst summary of version %q, which this persyst cannot read (it reads v1 and v%d)", v, Version)
	default:
		return digest.Report{}, errors.New("not a persyst summary")
	}
	if err != nil {
		return digest.Report{}, fmt.Errorf("persyst summary: %w", err)
	}
	zr, err := zlib.NewReader(bytes.NewReader(raw))
	if err != nil {
		return digest.Report{}, fmt.Errorf("persyst summary: %w", err)
	}
	js, err := io.ReadAll(io.LimitReader(zr, maxJSON+1))
	if err != nil {
		return digest.Report{}, fmt.Errorf("persyst summary: %w", err)
	}
	if len(js) > maxJSON {
		return digest.Report{}, fmt.Errorf("persyst summary: more than %d bytes inflated", maxJSON)
	}
	var s summary
	if err := json.Unmarshal(js, &s); err != nil {
		return digest.Report{}, fmt.Errorf("persyst summary: %w", err)
	}
	if s.V != version {
		return digest.Report{}, fmt.Errorf("persyst summary: version %d, want %d", s.V, version)
	}
	r := digest.Report{Schema: digest.SchemaVersion, JobID: s.Job, ArrayJobID: s.ArrayJob, ArrayTaskID: s.Task, Nodes: s.Nodes,
		NNodes: s.NNodes, CPUs: s.CPUs, GPUs: s.GPUs, GPUModel: s.GPUModel, GPUSlices: s.Slices, Seconds: s.Seconds, Samples: s.Samples, Short: s.Short, MinSeconds: s.MinSecs,
		StartupOnly: s.Startup, EndState: s.EndState, Findings: []properties.Result{}, Properties: []properties.Result{}}
	if s.Start != 0 {
		r.Start, r.End = time.Unix(s.Start, 0).UTC(), time.Unix(s.End, 0).UTC()
	}
	for _, f := range s.Findings {
		res := properties.Result{Key: f.Key, ID: f.ID, Name: f.Name, Unit: f.Unit, Domain: properties.Domain(f.Domain), Assessed: true,
			Deciles: f.Deciles, Threshold: f.Threshold, TimeShare: f.Share, MeanSeverity: f.Mean, MaxSeverity: f.Max, Score: f.Score, Finding: true}
		if len(res.Deciles) != 0 && len(res.Deciles) != 11 {
			return digest.Report{}, fmt.Errorf("persyst summary: finding %s: %d deciles, want 11", f.Key, len(res.Deciles))
		}
		if recommendation != nil {
			res.Recommendation = recommendation(f.Key)
		}
		r.Findings = append(r.Findings, res)
	}
	r.Omitted = max(s.More, 0)
	if c := s.Coverage; c != nil {
		r.Coverage = &digest.Coverage{Elapsed: c.Elapsed, Measured: c.Measured, Late: c.Late}
		for _, g := range c.Gaps {
			r.Coverage.Gaps = append(r.Coverage.Gaps, sample.Gap{From: time.Unix(g.From, 0).UTC(), To: time.Unix(g.To, 0).UTC(), Why: g.Why})
		}
		for _, m := range c.Missing {
			r.Coverage.Missing = append(r.Coverage.Missing, digest.MissingNode{Node: m.Node, Why: m.Why})
		}
	}
	for _, e := range s.Events {
		r.Events = append(r.Events, digest.Event{Key: e.Key, Text: e.Text, Recommendation: e.Rec})
	}
	s.around.report(&r)
	if s.Energy != nil {
		if r.Energy, err = s.Energy.report(); err != nil {
			return digest.Report{}, err
		}
	}
	digest.SliceWords(&r)
	return r, nil
}

// Find returns the persyst token in an AdminComment ("" and false when there is none).
func Find(adminComment string) (string, bool) {
	i := strings.Index(adminComment, "persyst:v")
	if i < 0 {
		return "", false
	}
	tok := adminComment[i:]
	if j := strings.IndexAny(tok, " \t\n"); j >= 0 {
		tok = tok[:j]
	}
	return tok, true
}

// Merge returns the AdminComment with the token, by the rule of the package comment.
func Merge(existing, tok string) (string, error) {
	if strings.TrimSpace(existing) == "" {
		return tok, nil
	}
	if _, ok := Find(existing); ok {
		return "", ErrPresent
	}
	merged := strings.TrimRight(existing, " \t\n") + " " + tok
	if len(merged) > MaxField {
		return "", ErrNoRoom
	}
	return merged, nil
}
