package accounting

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

func ptr[T any](v T) *T { return &v }

func report(findings int) digest.Report {
	t0 := time.Unix(1700000000, 0).UTC()
	r := digest.Report{Schema: digest.SchemaVersion, JobID: 4242, Nodes: []string{"node1", "node2"}, NNodes: 3, CPUs: 8, GPUs: 4,
		GPUModel: "NVIDIA A100-SXM4-40GB MIG 1g.5gb", GPUSlices: 4,
		Start: t0, End: t0.Add(95 * time.Second), Seconds: 95, Samples: 96, MinSeconds: 300, Short: true,
		Coverage: &digest.Coverage{Elapsed: 100, Measured: 95, Gaps: []sample.Gap{{From: t0.Add(-5 * time.Second), To: t0, Why: "before measurement began"}},
			Missing: []digest.MissingNode{{Node: "node3", Why: "unreachable"}}},
		EndState: &digest.EndState{State: "OUT_OF_MEMORY", ExitCode: 0, Signal: 9},
		Events:   []digest.Event{{Key: "oom_kill", Text: "The kernel killed 1 process for lack of memory.", Recommendation: "Ask for more memory."}},
		Findings: []properties.Result{}, Properties: []properties.Result{},
		// What the digest says beside the findings.
		Suspended: []sample.Gap{{From: t0.Add(10 * time.Second), To: t0.Add(20 * time.Second)}},
		Interference: &phases.Interference{Seconds: 95, Assessed: 90, LostSeconds: 15.2, Share: 0.16, Class: "high", Intervals: 5,
			Causes: []phases.Cause{{Key: phases.CauseCPU, LostSeconds: 15.2}},
			Worst:  &phases.Stretch{From: t0.Add(30 * time.Second), To: t0.Add(40 * time.Second)}},
		InterferenceNode: "node1",
		Alike: &phases.Alikeness{Nodes: 2, Score: 0.6, Unlike: []phases.UnlikeNode{{Node: "node2", Alike: 0.4,
			Stretch: phases.Stretch{From: t0.Add(50 * time.Second), To: t0.Add(70 * time.Second)}, NCPUs: 4, OthersNCPUs: 4}}},
		Episodes: []episodes.Episode{{From: t0.Add(60 * time.Second), To: t0.Add(80 * time.Second), Jobs: 40, Stalled: 12}},
		Notes:    []digest.Event{{Key: "memory_near_limit", Text: "Memory came close to the limit.", Recommendation: "Ask for a little more."}},
		Energy: &digest.Energy{Joules: 5_400_000, KWh: 1.5, Parts: map[string]float64{"cpu": 4_000_000, "dram": 500_000, "gpus": 900_000},
			Estimate: true, How: "RAPL (powercap): the job's share of the node's by its CPU time (DRAM: by its memory), an estimate; GPUs: NVML",
			Nodes: []string{"node1"}, CO2Grams: 570, CO2PerKWh: 380}}
	for i := range findings {
		d := make([]float64, 11)
		for k := range d {
			d[k] = float64(i+1) * (1 + float64(k)/7)
		}
		r.Findings = append(r.Findings, properties.Result{Key: fmt.Sprintf("prop_%d", i), ID: fmt.Sprintf("prop_%d", i),
			Name: fmt.Sprintf("Property number %d", i), Unit: "B", Domain: properties.Domain("node"), Assessed: true, Deciles: d,
			Threshold: ptr(1024.0), TimeShare: 0.75, MeanSeverity: 0.5, MaxSeverity: 1, Score: 0.5 - float64(i)/100, Finding: true})
	}
	return r
}

func TestRoundTrip(t *testing.T) {
	in := report(3)
	tok, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, Prefix) || strings.ContainsAny(tok, " ,=\"'|\n") || len(tok) > MaxToken {
		t.Fatalf("token %q: want %s..., no separators, at most %d bytes", tok, Prefix, MaxToken)
	}
	got, err := Decode(tok, func(k string) string { return "try " + k })
	if err != nil {
		t.Fatal(err)
	}
	want := in
	for i := range want.Findings {
		want.Findings[i].Recommendation = "try " + want.Findings[i].Key
		for k, v := range want.Findings[i].Deciles {
			want.Findings[i].Deciles[k] = round4(v)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	// The text rendered from the summary is the digest's.
	if a, b := digest.Text(want, digest.TextOptions{}), digest.Text(got, digest.TextOptions{}); a != b {
		t.Errorf("text from the summary differs:\n%s\nwant:\n%s", b, a)
	}
}

func TestManyFindingsAreCounted(t *testing.T) {
	in := report(60)
	tok, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) > MaxToken {
		t.Fatalf("%d bytes, more than %d", len(tok), MaxToken)
	}
	got, err := Decode(tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Findings) == 0 || len(got.Findings)+got.Omitted != 60 {
		t.Fatalf("%d findings kept and %d counted, want 60 in all", len(got.Findings), got.Omitted)
	}
	if got.Findings[0].Key != "prop_0" {
		t.Errorf("first finding kept: %s, want the most important", got.Findings[0].Key)
	}
	text := digest.Text(got, digest.TextOptions{})
	if want := fmt.Sprintf("... and %d more", 60-5); !strings.Contains(text, want) {
		t.Errorf("text does not say %q:\n%s", want, text)
	}
	// What qualifies every finding stays; the nodes unlike the rest and the episodes go
	// first.
	if got.Interference == nil || !strings.Contains(text, "lost to other work on node1") || got.Alike != nil || got.Episodes != nil {
		t.Errorf("interference %+v, alike %+v, episodes %+v: want the time lost kept, the rest dropped first:\n%s", got.Interference, got.Alike, got.Episodes, text)
	}
}

func deflate(b []byte) string {
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return Prefix + lowerBase32.EncodeToString(buf.Bytes())
}

// deflateV1 makes a version 1 token (base64url), as persyst wrote them first.
func deflateV1(b []byte) string {
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return prefixV1 + base64.RawURLEncoding.EncodeToString(buf.Bytes())
}

func TestDecodeRefuses(t *testing.T) {
	tests := []struct{ name, tok, want string }{
		{"not a summary", "site note", "not a persyst summary"},
		{"a newer version", "persyst:v7:abc", `version "v7"`},
		{"bad base32", Prefix + "!!!", "persyst summary: illegal base32"},
		{"bad base64 (v1)", prefixV1 + "!!!", "persyst summary: illegal base64"},
		{"not zlib", Prefix + "aaaa", "persyst summary"},
		{"not JSON", deflate([]byte("nope")), "persyst summary: invalid character"},
		{"a zip bomb", deflate(make([]byte, 2<<20)), "more than 1048576 bytes inflated"},
		{"wrong version inside", deflate([]byte(`{"v":1}`)), "version 1, want 2"},
		{"wrong version inside v1", deflateV1([]byte(`{"v":2}`)), "version 2, want 1"},
		{"deciles cut", deflate([]byte(`{"v":2,"f":[{"k":"x","d":[1,2]}]}`)), "finding x: 2 deciles"},
		{"negative energy", deflate([]byte(`{"v":2,"en":{"p":{"cpu":-5}}}`)), `energy part "cpu": -5 joules`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.tok, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Decode = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestMergeAndFind(t *testing.T) {
	tok := Prefix + "pcofkm2jfuxacacelua4c"
	tests := []struct {
		name, existing, want string
		err                  error
	}{
		{"empty", "", tok, nil},
		{"blank", "  ", tok, nil},
		{"a site's note is kept before the token", "checked by admin; reason=x", "checked by admin; reason=x " + tok, nil},
		{"written once", "note " + Prefix + "other", "", ErrPresent},
		{"an older or newer persyst's summary counts too", "persyst:v2:zzz", "", ErrPresent},
		{"no room", strings.Repeat("x", MaxField-len(tok)), "", ErrNoRoom},
		{"just room", strings.Repeat("x", MaxField-len(tok)-1), strings.Repeat("x", MaxField-len(tok)-1) + " " + tok, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Merge(tc.existing, tok)
			if err != tc.err || got != tc.want {
				t.Fatalf("Merge = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
			if err == nil {
				if f, ok := Find(got); !ok || f != tok {
					t.Errorf("Find(%q) = %q, %v; want the token", got, f, ok)
				}
			}
		})
	}
	if _, ok := Find("no summary here"); ok {
		t.Error("Find found a token in a comment without one")
	}
}

// A token survives what Slurm's tools do to an AdminComment: sacctmgr 22.05 lowercases
// what it sets. Version 1 tokens (base64url), written before, still read.
func TestTokenCase(t *testing.T) {
	rep := report(3)
	tok, err := Encode(rep)
	if err != nil {
		t.Fatal(err)
	}
	if tok != strings.ToLower(tok) || !strings.HasPrefix(tok, "persyst:v2:") {
		t.Fatalf("token %q: want persyst:v2: and no capitals", tok)
	}
	want, err := Decode(tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := strings.TrimPrefix(tok, Prefix)
	if got, err := Decode(Prefix+strings.ToUpper(body), nil); err != nil || !cmp.Equal(want, got) {
		t.Errorf("token with its body in capitals: %v (-want +got):\n%s", err, cmp.Diff(want, got))
	}
	v1 := deflateV1([]byte(`{"v":1,"j":77,"f":[]}`))
	if got, err := Decode(v1, nil); err != nil || got.JobID != 77 {
		t.Errorf("version 1 token: job %d, %v; want job 77", got.JobID, err)
	}
}
