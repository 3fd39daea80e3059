package sitesim

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TreeFigures are what the collectors of a site in a box say of themselves at the end
// (their Prometheus metrics, summed over the collectors): the pushes they refused by
// reason, the connections and calls their authentication refused by stage, and the
// delay from a cycle's read to its summary stored.
type TreeFigures struct {
	RefusedPushes map[string]float64 // persyst_collector_refused_pushes_total by reason
	RefusedTree   map[string]float64 // persyst_tree_refused_total by stage
	Stored        float64            // cycle summaries stored
	// DelayP50 and DelayP95 are the upper bounds of the histogram buckets that hold the
	// median and the 95th percentile of the store delay, in seconds (+Inf: beyond the
	// last bucket).
	DelayP50, DelayP95 float64
}

// Scrape reads the metrics of the agents at urls (their /metrics) and sums them.
func Scrape(ctx context.Context, urls []string) (TreeFigures, error) {
	f := TreeFigures{RefusedPushes: map[string]float64{}, RefusedTree: map[string]float64{}}
	buckets := map[float64]float64{} // upper bound → cumulative count, summed
	for _, u := range urls {
		fams, err := scrapeOne(ctx, u)
		if err != nil {
			return f, err
		}
		sumBy(fams["persyst_collector_refused_pushes_total"], "reason", f.RefusedPushes)
		sumBy(fams["persyst_tree_refused_total"], "stage", f.RefusedTree)
		if h := fams["persyst_collector_store_delay_seconds"]; h != nil {
			for _, m := range h.Metric {
				f.Stored += float64(m.GetHistogram().GetSampleCount())
				for _, b := range m.GetHistogram().Bucket {
					buckets[b.GetUpperBound()] += float64(b.GetCumulativeCount())
				}
			}
		}
	}
	f.DelayP50, f.DelayP95 = quantileBound(buckets, f.Stored, 0.5), quantileBound(buckets, f.Stored, 0.95)
	return f, nil
}

func scrapeOne(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: HTTP %d: %s", url, resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return fams, nil
}

// sumBy adds a counter family's values into out by the value of label.
func sumBy(fam *dto.MetricFamily, label string, out map[string]float64) {
	if fam == nil {
		return
	}
	for _, m := range fam.Metric {
		for _, l := range m.Label {
			if l.GetName() == label {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
}

// quantileBound is the upper bound of the first bucket whose cumulative count reaches q
// of total (NaN: no observations).
func quantileBound(buckets map[float64]float64, total, q float64) float64 {
	if total == 0 {
		return math.NaN()
	}
	bounds := make([]float64, 0, len(buckets))
	for b := range buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	for _, b := range bounds {
		if buckets[b] >= q*total {
			return b
		}
	}
	return math.Inf(1)
}
