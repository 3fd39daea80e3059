package store

import (
	"encoding/json"
	"fmt"

	"github.com/klauspost/compress/zstd"

	"github.com/persyst/persyst/digest"
)

// Reports are kept as zstd-compressed JSON (codec "zstd"): a report lists every property
// of the strategy with its deciles, 10 to 20 kB of JSON, and a site keeps a million of
// them a week; compressed they take a quarter of that (docs/performance.md). Reports of
// databases before compression stay as they were (codec "json") until replaced.
// zstd (github.com/klauspost/compress, pure Go) compresses about as small as gzip at
// several times its speed, and is what the frontend's CPU budget can afford per report.
type codec struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
}

// maxReportBytes bounds a report as decompressed (a report is some tens of kB; a damaged
// or hostile row must not make the reader allocate without bound).
const maxReportBytes = 16 << 20

func newCodec() (*codec, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxReportBytes))
	if err != nil {
		return nil, err
	}
	return &codec{enc: enc, dec: dec}, nil
}

func (c *codec) close() { c.dec.Close() }

// encode is a report as stored: JSON, compressed.
func (c *codec) encode(r *digest.Report) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return c.enc.EncodeAll(b, nil), nil
}

// decode reads a stored report.
func (c *codec) decode(codecName string, b []byte) (*digest.Report, error) {
	switch codecName {
	case "zstd":
		var err error
		if b, err = c.dec.DecodeAll(b, nil); err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
	case "json":
	default:
		return nil, fmt.Errorf("report: codec %q", codecName)
	}
	var r digest.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return &r, nil
}
