package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// Chart sizes in SVG user units (pixels) when a chart leaves them 0.
const (
	DefaultWidth  = 720
	DefaultHeight = 360
)

// palette colours the series in order (colour-blind safe, Okabe-Ito).
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"}

const (
	marginLeft, marginRight, marginTop, marginBottom = 72, 150, 36, 48
)

// ErrEmptyChart is returned for a chart with nothing to draw.
var ErrEmptyChart = errors.New("report: chart has no data")

// LineChart draws series as lines with markers on shared axes that start
// at 0 (so ratios read true).
type LineChart struct {
	Title, XLabel, YLabel string
	Series                []*Series
	Width, Height         int
}

// WriteSVG writes the chart as a standalone SVG document. It fails with
// ErrEmptyChart when no series has a point.
func (c LineChart) WriteSVG(w io.Writer) error {
	maxX, maxY, n := 0.0, 0.0, 0
	for _, s := range c.Series {
		for _, p := range s.Points() {
			maxX, maxY, n = math.Max(maxX, p.X), math.Max(maxY, p.Y), n+1
		}
	}
	if n == 0 {
		return ErrEmptyChart
	}
	cv := newCanvas(c.Width, c.Height, c.Title)
	xs, ys := niceTicks(maxX), niceTicks(maxY)
	cv.axes(xs, ys, c.XLabel, c.YLabel)
	for i, s := range c.Series {
		col := palette[i%len(palette)]
		var pts []string
		for _, p := range s.Points() {
			x, y := cv.x(p.X, xs), cv.y(p.Y, ys)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			fmt.Fprintf(&cv.b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", x, y, col)
		}
		if len(pts) > 1 {
			fmt.Fprintf(&cv.b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", col, strings.Join(pts, " "))
		}
		cv.legend(i, s.Name, col)
	}
	return cv.finish(w)
}

// BarSeries is one bar per group, Values[i] for Groups[i].
type BarSeries struct {
	Name   string
	Values []float64
}

// BarChart draws grouped bars: per group (a stage) one bar per series
// (measured, its limit ...).
type BarChart struct {
	Title, YLabel string
	Groups        []string
	Series        []BarSeries
	Width, Height int
}

// WriteSVG writes the chart as a standalone SVG document. It fails with
// ErrEmptyChart without groups or series, and with an error naming the
// series whose Values do not match Groups.
func (c BarChart) WriteSVG(w io.Writer) error {
	if len(c.Groups) == 0 || len(c.Series) == 0 {
		return ErrEmptyChart
	}
	maxY := 0.0
	for _, s := range c.Series {
		if len(s.Values) != len(c.Groups) {
			return fmt.Errorf("report: bar series %q has %d values for %d groups", s.Name, len(s.Values), len(c.Groups))
		}
		for _, v := range s.Values {
			if finite(v) {
				maxY = math.Max(maxY, v)
			}
		}
	}
	cv := newCanvas(c.Width, c.Height, c.Title)
	ys := niceTicks(maxY)
	cv.axes(nil, ys, "", c.YLabel)
	gw := cv.plotW() / float64(len(c.Groups))
	bw := gw * 0.8 / float64(len(c.Series))
	for g, name := range c.Groups {
		x0 := float64(marginLeft) + gw*float64(g) + gw*0.1
		cv.text(x0+gw*0.4, float64(cv.h-marginBottom)+16, "middle", name)
		for i, s := range c.Series {
			v := s.Values[g]
			if !finite(v) || v < 0 {
				continue
			}
			y := cv.y(v, ys)
			fmt.Fprintf(&cv.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
				x0+bw*float64(i), y, bw*0.95, float64(cv.h-marginBottom)-y, palette[i%len(palette)], esc(name), esc(s.Name), num(v))
		}
	}
	for i, s := range c.Series {
		cv.legend(i, s.Name, palette[i%len(palette)])
	}
	return cv.finish(w)
}

// Chart is a LineChart or a BarChart.
type Chart interface{ WriteSVG(io.Writer) error }

// SVG renders a chart to a string (WriteSVG into a buffer).
func SVG(c Chart) (string, error) {
	var b bytes.Buffer
	err := c.WriteSVG(&b)
	return b.String(), err
}

// WriteSVGFile renders c into the file at path. A chart that fails to
// render (ErrEmptyChart) leaves no file.
func WriteSVGFile(path string, c Chart) error {
	doc, err := SVG(c)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

type canvas struct {
	w, h int
	b    bytes.Buffer
}

func newCanvas(w, h int, title string) *canvas {
	if w <= 0 {
		w = DefaultWidth
	}
	if h <= 0 {
		h = DefaultHeight
	}
	c := &canvas{w: w, h: h}
	fmt.Fprintf(&c.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&c.b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	if title != "" {
		fmt.Fprintf(&c.b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", marginLeft, esc(title))
	}
	return c
}

func (c *canvas) plotW() float64 { return float64(c.w - marginLeft - marginRight) }
func (c *canvas) plotH() float64 { return float64(c.h - marginTop - marginBottom) }

func (c *canvas) x(v float64, t []float64) float64 {
	return float64(marginLeft) + v/t[len(t)-1]*c.plotW()
}

func (c *canvas) y(v float64, t []float64) float64 {
	return float64(c.h-marginBottom) - v/t[len(t)-1]*c.plotH()
}

func (c *canvas) text(x, y float64, anchor, s string) {
	fmt.Fprintf(&c.b, `<text x="%.1f" y="%.1f" text-anchor="%s">%s</text>`+"\n", x, y, anchor, esc(s))
}

// axes draws the frame, horizontal grid lines at ys and, unless xs is nil,
// x ticks at xs.
func (c *canvas) axes(xs, ys []float64, xl, yl string) {
	left, bottom := float64(marginLeft), float64(c.h-marginBottom)
	right := left + c.plotW()
	for _, v := range ys {
		y := c.y(v, ys)
		fmt.Fprintf(&c.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, right, y)
		c.text(left-6, y+4, "end", num(v))
	}
	for _, v := range xs {
		x := c.x(v, xs)
		fmt.Fprintf(&c.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`+"\n", x, bottom, x, bottom+4)
		c.text(x, bottom+16, "middle", num(v))
	}
	fmt.Fprintf(&c.b, `<polyline fill="none" stroke="#333" points="%.1f,%.1f %.1f,%.1f %.1f,%.1f"/>`+"\n", left, float64(marginTop), left, bottom, right, bottom)
	if xl != "" {
		c.text(left+c.plotW()/2, float64(c.h)-8, "middle", xl)
	}
	if yl != "" {
		fmt.Fprintf(&c.b, `<text transform="translate(16,%.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", float64(marginTop)+c.plotH()/2, esc(yl))
	}
}

func (c *canvas) legend(i int, name, col string) {
	x, y := float64(c.w-marginRight+12), float64(marginTop+8+18*i)
	fmt.Fprintf(&c.b, `<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/>`+"\n", x, y-10, col)
	fmt.Fprintf(&c.b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x+16, y, esc(name))
}

func (c *canvas) finish(w io.Writer) error {
	c.b.WriteString("</svg>\n")
	_, err := w.Write(c.b.Bytes())
	return err
}

// niceTicks returns 0 and about five round steps (1, 2 or 5 times a power
// of ten) up to at least maxV; the last tick is the axis' end.
func niceTicks(maxV float64) []float64 {
	if !(maxV > 0) || !finite(maxV) {
		return []float64{0, 1}
	}
	raw := maxV / 5
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	step := p
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * p; step >= raw {
			break
		}
	}
	ticks := []float64{0}
	for v := step; ; v += step {
		ticks = append(ticks, v)
		if v >= maxV*(1-1e-9) {
			return ticks
		}
	}
}

// num formats an axis or bar value: integers plainly, thousands as k.
func num(v float64) string {
	switch {
	case v >= 1e6 && math.Mod(v, 1e5) == 0:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3 && math.Mod(v, 100) == 0:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	case v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
