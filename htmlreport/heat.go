package htmlreport

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"maps"
	"math"
	"slices"
	"sort"

	"github.com/persyst/persyst/sample"
)

// palette is the heat map's 64 shades, white (idle) to dark red (busy), and a grey for
// "not measured".
var palette = func() color.Palette {
	p := make(color.Palette, 0, 65)
	for i := range 64 {
		f := float64(i) / 63
		// white → yellow → orange → dark red
		r := 255 - uint8(80*math.Max(0, f-0.6)/0.4)
		g := uint8(255 * (1 - f))
		b := uint8(255 * math.Max(0, 1-2*f))
		p = append(p, color.RGBA{r, g, b, 255})
	}
	return append(p, color.RGBA{220, 220, 220, 255})
}()

const noValue = 64 // palette index of "not measured"

// cpuGrid is the use (busy share) of every CPU and GPU of a job's nodes in every
// interval: rows are the nodes' CPUs (task-clock per CPU), then their GPUs (the time a
// kernel ran, GPUs the job had alone), node by node; NaN where not measured.
type cpuGrid struct {
	rows []rowKey
	ts   []int64
	grid []float32
	any  bool // a value is not NaN
	gpus int  // rows that are GPUs
}

type rowKey struct {
	node int
	gpu  bool // a GPU (id: NVML's index), after the node's CPUs
	id   int
}

// nodeRows returns the rows [from, to) of node ni's CPUs.
func (g *cpuGrid) nodeRows(ni int) (from, to int) {
	from = sort.Search(len(g.rows), func(i int) bool { return g.rows[i].node >= ni })
	to = sort.Search(len(g.rows), func(i int) bool { return g.rows[i].node > ni || g.rows[i].node == ni && g.rows[i].gpu })
	return from, to
}

// cpuUse reads every node's per-CPU task-clock and per-GPU busy time once.
func cpuUse(nodes []NodeSamples) *cpuGrid {
	g := &cpuGrid{}
	times := map[int64]bool{}
	for ni, n := range nodes {
		cpus, gpus := map[int]bool{}, map[int]bool{}
		for _, s := range n.Samples {
			if s.Seconds <= 0 || len(s.CPU) == 0 && len(s.GPU) == 0 {
				continue
			}
			times[s.Time.Unix()] = true
			for _, c := range s.CPU {
				cpus[c.CPU] = true
			}
			for _, x := range s.GPU {
				gpus[x.GPU] = true
			}
		}
		for _, c := range slices.Sorted(maps.Keys(cpus)) {
			g.rows = append(g.rows, rowKey{node: ni, id: c})
		}
		for _, x := range slices.Sorted(maps.Keys(gpus)) {
			g.rows = append(g.rows, rowKey{node: ni, gpu: true, id: x})
			g.gpus++
		}
	}
	g.ts = slices.Sorted(maps.Keys(times))
	col := make(map[int64]int, len(g.ts))
	for i, t := range g.ts {
		col[t] = i
	}
	row := make(map[rowKey]int, len(g.rows))
	for i, k := range g.rows {
		row[k] = i
	}
	nts := len(g.ts)
	g.grid = make([]float32, len(g.rows)*nts)
	for i := range g.grid {
		g.grid[i] = float32(math.NaN())
	}
	set := func(k rowKey, c int, v float64) {
		if r, ok := row[k]; ok {
			g.grid[r*nts+c] = float32(v)
			g.any = true
		}
	}
	for ni, n := range nodes {
		for _, s := range n.Samples {
			c, ok := col[s.Time.Unix()]
			if !ok || s.Seconds <= 0 {
				continue
			}
			for _, cv := range s.CPU {
				if ns, ok := cv.Values["task-clock"]; ok {
					set(rowKey{node: ni, id: cv.CPU}, c, ns/1e9/s.Seconds)
				}
			}
			for _, x := range s.GPU {
				if busy, ok := x.Values[sample.GPUValueBusySeconds]; ok {
					set(rowKey{node: ni, gpu: true, id: x.GPU}, c, busy/s.Seconds)
				}
			}
		}
	}
	return g
}

// heatFromSamples is the CPU × time heat map of CPU use, or nil with a note when no node
// measured it per CPU.
func heatFromSamples(nodes []NodeSamples, g *cpuGrid, v *View) *Heat {
	if !g.any {
		v.Notes = append(v.Notes, "No heat map: no node measured CPU use per CPU (perf's task-clock).")
		return nil
	}
	rows, ts, grid := g.rows, g.ts, g.grid
	h := &Heat{Title: "CPU use of each CPU over time", Unit: "share", CPUs: len(rows) - g.gpus, GPUs: g.gpus, Max: 1,
		PerRow: (len(rows) + MaxHeatRows - 1) / MaxHeatRows, PerCol: (len(ts) + MaxHeatCols - 1) / MaxHeatCols}
	h.Rows = (len(rows) + h.PerRow - 1) / h.PerRow
	h.Cols = (len(ts) + h.PerCol - 1) / h.PerCol
	if g.gpus > 0 {
		h.Title = "CPU and GPU use of each CPU and GPU over time"
	}
	for i, k := range rows {
		switch {
		case i == 0 || rows[i-1].node != k.node:
			label := nodes[k.node].Node
			if k.gpu {
				label += " GPUs"
			}
			h.RowLabels = append(h.RowLabels, RowLabel{Row: i / h.PerRow, Node: label})
		case k.gpu && !rows[i-1].gpu:
			h.RowLabels = append(h.RowLabels, RowLabel{Row: i / h.PerRow, Node: nodes[k.node].Node + " GPUs"})
		}
	}
	if h.PerRow > 1 {
		what := fmt.Sprintf("%d CPUs", len(rows))
		if g.gpus > 0 {
			what = fmt.Sprintf("%d CPUs and GPUs", len(rows))
		}
		v.Notes = append(v.Notes, fmt.Sprintf("Heat map: %s, more than %d rows: each row is the mean of %d CPUs.", what, MaxHeatRows, h.PerRow))
	}
	if h.PerCol > 1 {
		v.Notes = append(v.Notes, fmt.Sprintf("Heat map: %d intervals, more than %d columns: each column is the mean of %d intervals.", len(ts), MaxHeatCols, h.PerCol))
	}
	img := image.NewPaletted(image.Rect(0, 0, h.Cols, h.Rows), palette)
	for y := range h.Rows {
		for x := range h.Cols {
			sum, n := 0.0, 0
			for r := y * h.PerRow; r < min((y+1)*h.PerRow, len(rows)); r++ {
				for c := x * h.PerCol; c < min((x+1)*h.PerCol, len(ts)); c++ {
					if g := grid[r*len(ts)+c]; !math.IsNaN(float64(g)) {
						sum += float64(g)
						n++
					}
				}
			}
			idx := uint8(noValue)
			if n > 0 {
				idx = uint8(math.Round(math.Min(math.Max(sum/float64(n)/h.Max, 0), 1) * 63))
			}
			img.SetColorIndex(x, y, idx)
		}
	}
	var b bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&b, img); err != nil {
		v.Notes = append(v.Notes, "No heat map: "+err.Error())
		return nil
	}
	h.PNG = b.Bytes()
	return h
}
