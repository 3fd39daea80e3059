package daemon

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"

	"github.com/persyst/persyst/sample"
)

// appendSampleJSON appends json.Marshal(s) to b, byte for byte, about four times faster:
// the daemon keeps every sample of every job on disk at every cycle. Whatever it does
// not encode itself (a string that needs escaping, a value JSON cannot hold) goes
// through encoding/json, which then also reports the error.
func appendSampleJSON(b []byte, s sample.Sample) ([]byte, error) {
	return appendSampleJSONKeys(b, s, nil)
}

// jsonKeys are the sorted keys of the last sample's maps: the next sample of a job has
// the same, and is encoded without sorting them again.
type jsonKeys struct {
	job, cpu []string
}

// appendSampleJSONKeys is appendSampleJSON with the keys of the last sample (nil: none
// kept).
func appendSampleJSONKeys(b []byte, s sample.Sample, keys *jsonKeys) ([]byte, error) {
	var jobKeys, cpuKeys *[]string
	if keys != nil {
		jobKeys, cpuKeys = &keys.job, &keys.cpu
	}
	start := len(b)
	t, err := s.Time.MarshalJSON()
	if err != nil {
		return b, err
	}
	b = append(b, `{"time":`...)
	b = append(b, t...)
	b = append(b, `,"reason":`...)
	ok := true
	b, ok = appendJSONString(b, string(s.Reason), ok)
	b = append(b, `,"seconds":`...)
	b, ok = appendJSONFloat(b, s.Seconds, ok)
	b = append(b, `,"job":`...)
	b, ok = appendJSONMap(b, s.Job, ok, jobKeys)
	if len(s.CPU) > 0 {
		b = append(b, `,"cpu":[`...)
		for i, c := range s.CPU {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"cpu":`...)
			b = strconv.AppendInt(b, int64(c.CPU), 10)
			b = append(b, `,"values":`...)
			b, ok = appendJSONMap(b, c.Values, ok, cpuKeys)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(s.LowCoverage) > 0 {
		b = append(b, `,"low_coverage":[`...)
		for i, x := range s.LowCoverage {
			if i > 0 {
				b = append(b, ',')
			}
			b, ok = appendJSONString(b, x, ok)
		}
		b = append(b, ']')
	}
	b = append(b, '}')
	// A GPU job's per-GPU values are few: encoding/json writes them (and the line).
	ok = ok && len(s.GPU) == 0
	if !ok {
		line, err := json.Marshal(s)
		if err != nil {
			return b[:start], err
		}
		return append(b[:start], line...), nil
	}
	return b, nil
}

// appendJSONString appends s quoted; ok becomes false for a string encoding/json would
// escape (control characters, quotes, backslashes, <, >, &, non-ASCII).
func appendJSONString(b []byte, s string, ok bool) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			ok = false
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), ok
}

// appendJSONFloat appends f as encoding/json does; ok becomes false for NaN and ±Inf.
func appendJSONFloat(b []byte, f float64, ok bool) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return append(b, '0'), false
	}
	if f == math.Trunc(f) && f > -1e15 && f < 1e15 && (f != 0 || !math.Signbit(f)) {
		// An integral value (most counters) is its digits, as encoding/json writes it
		// ('f' format below 1e21), without the shortest-float search.
		return strconv.AppendInt(b, int64(f), 10), ok
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 → e-9, as encoding/json writes it.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, ok
}

// appendJSONMap appends m with its keys sorted, as encoding/json does (nil: null). cache,
// if not nil, holds the sorted keys of the last map: when m has the same, they are not
// sorted again; else they are, and kept there.
func appendJSONMap(b []byte, m map[string]float64, ok bool, cache *[]string) ([]byte, bool) {
	if m == nil {
		return append(b, "null"...), ok
	}
	if cache != nil && len(*cache) == len(m) {
		start, okBefore, same := len(b), ok, true
		b = append(b, '{')
		for i, k := range *cache {
			v, in := m[k]
			if !in {
				same = false
				break
			}
			if i > 0 {
				b = append(b, ',')
			}
			b, ok = appendJSONString(b, k, ok)
			b = append(b, ':')
			b, ok = appendJSONFloat(b, v, ok)
		}
		if same { // as many keys, all of them in m: the same keys
			return append(b, '}'), ok
		}
		b, ok = b[:start], okBefore
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if cache != nil {
		*cache = keys
	}
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b, ok = appendJSONString(b, k, ok)
		b = append(b, ':')
		b, ok = appendJSONFloat(b, m[k], ok)
	}
	return append(b, '}'), ok
}
