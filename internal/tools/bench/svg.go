package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Heat map geometry, in SVG user units.
const (
	cellW, cellH = 104, 66
	padLeft      = 96
	padTop       = 110
	minWidth     = 720
	padRight     = 130
	padBottom    = 126
	legendH      = 180
	legendW      = 16
)

// WriteSVG draws the speedup over W × L as a heat map (the ReDrafter
// paper's Figure 7): beam length across, beam width up, each cell labelled
// with its speedup and tokens per step, green above 1× and red below.
func (r *Report) WriteSVG(w io.Writer) error {
	widths, lengths := r.axes()
	if len(widths) == 0 {
		return fmt.Errorf("bench: no cells to draw")
	}
	span := r.colorSpan()
	gw, gh := cellW*len(lengths), cellH*len(widths)
	width := max(padLeft+gw+padRight, minWidth)
	height := padTop + max(gh, legendH) + padBottom
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif">`+"\n",
		width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	p(`<text x="%d" y="28" font-size="17" font-weight="bold">%s</text>`+"\n", 16, esc("ReDrafter speedup over autoregressive decoding"))
	m := r.Model
	sub := fmt.Sprintf("%s: dim %d, %d layers, %d heads of %d, FFN %d, vocab %d", m.Arch, m.Dim, m.Layers, m.Heads, m.HeadDim, m.FFN, m.Vocab)
	p(`<text x="%d" y="48" font-size="11" fill="#333">%s</text>`+"\n", 16, esc(sub))
	mc := r.Machine
	sub2 := fmt.Sprintf("%s, %s, %s backend", orUnknown(mc.CPU), plural(mc.Threads, "thread"), mc.Backend)
	p(`<text x="%d" y="63" font-size="11" fill="#333">%s</text>`+"\n", 16, esc(sub2))
	sub3 := fmt.Sprintf("%s · load %.2f→%.2f · %s × up to %d tokens, greedy", r.Date.Format("2006-01-02 15:04 MST"),
		mc.LoadBefore[0], mc.LoadAfter[0], plural(len(r.Prompts), "prompt"), r.MaxTokens)
	p(`<text x="%d" y="78" font-size="11" fill="#333">%s</text>`+"\n", 16, esc(sub3))

	// Cells: widths bottom to top, lengths left to right.
	for i, wd := range widths {
		y := padTop + gh - (i+1)*cellH
		for j, l := range lengths {
			x := padLeft + j*cellW
			c := r.Cell(wd, l)
			if c == nil {
				p(`<rect x="%d" y="%d" width="%d" height="%d" fill="#eeeeee" stroke="#ffffff" stroke-width="2"/>`+"\n", x, y, cellW, cellH)
				continue
			}
			fill, ink := color(c.Speedup, span)
			p(`<rect x="%d" y="%d" width="%d" height="%d" fill="%s" stroke="#ffffff" stroke-width="2"><title>%s</title></rect>`+"\n",
				x, y, cellW, cellH, fill, esc(fmt.Sprintf("W=%d L=%d: %.2f tokens/s, %.2f× autoregressive, %.2f tokens per step, compression %.2f",
					c.W, c.L, c.TokensPerSecond, c.Speedup, c.TokensPerStep, c.Compression)))
			p(`<text x="%d" y="%d" font-size="18" font-weight="bold" text-anchor="middle" fill="%s">%s</text>`+"\n",
				x+cellW/2, y+cellH/2+2, ink, esc(c.speedupLabel()))
			p(`<text x="%d" y="%d" font-size="10" text-anchor="middle" fill="%s">%s</text>`+"\n",
				x+cellW/2, y+cellH/2+19, ink, esc(fmt.Sprintf("%.2f tok/step", c.TokensPerStep)))
		}
		p(`<text x="%d" y="%d" font-size="13" text-anchor="end">%d</text>`+"\n", padLeft-10, y+cellH/2+5, wd)
	}
	for j, l := range lengths {
		p(`<text x="%d" y="%d" font-size="13" text-anchor="middle">%d</text>`+"\n", padLeft+j*cellW+cellW/2, padTop+gh+20, l)
	}
	p(`<text x="%d" y="%d" font-size="13" text-anchor="middle">beam length L</text>`+"\n", padLeft+gw/2, padTop+gh+42)
	p(`<text x="%d" y="%d" font-size="13" text-anchor="middle" transform="rotate(-90 %d %d)">beam width W</text>`+"\n",
		padLeft-48, padTop+gh/2, padLeft-48, padTop+gh/2)

	// Legend: the colour scale from 2^-span to 2^span.
	lx, ly := padLeft+gw+36, padTop
	p(`<defs><linearGradient id="scale" x1="0" y1="1" x2="0" y2="0">`)
	for k := 0; k <= 8; k++ {
		f := float64(k) / 8
		fill, _ := color(math.Exp2((2*f-1)*span), span)
		p(`<stop offset="%.3f" stop-color="%s"/>`, f, fill)
	}
	p("</linearGradient></defs>\n")
	p(`<rect x="%d" y="%d" width="%d" height="%d" fill="url(#scale)" stroke="#999"/>`+"\n", lx, ly, legendW, legendH)
	for k := -2; k <= 2; k++ {
		s := math.Exp2(float64(k) * span / 2)
		f := (float64(k)/2 + 1) / 2
		ty := ly + int(math.Round((1-f)*legendH))
		p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`, lx+legendW, ty, lx+legendW+4, ty)
		p(`<text x="%d" y="%d" font-size="11">%s</text>`+"\n", lx+legendW+7, ty+4, esc(fmt.Sprintf("%.2g×", s)))
	}
	p(`<text x="%d" y="%d" font-size="11">speedup</text>`+"\n", lx-6, ly-8)

	// Footnotes.
	ar := r.Autoregressive
	notes := []string{fmt.Sprintf("Autoregressive baseline: %.2f tokens/s (%.2f ms per token).", ar.TokensPerSecond, ar.MSPerToken()),
		"Both decoders produced the same tokens on every prompt (checked)."}
	if m.InflatedFrom != "" {
		notes = append(notes, fmt.Sprintf("Inflated from %s:", m.InflatedFrom),
			fmt.Sprintf("same logits, real cost; the vocabulary (%d) cannot be padded.", m.Vocab))
	}
	for k, n := range notes {
		p(`<text x="%d" y="%d" font-size="10" fill="#444">%s</text>`+"\n", 16, padTop+max(gh, legendH)+62+14*k, esc(n))
	}
	p("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

func (c *Cell) speedupLabel() string { return fmt.Sprintf("%.2f×", c.Speedup) }

// axes lists the widths and lengths present, ascending.
func (r *Report) axes() (widths, lengths []int) {
	for _, c := range r.Cells {
		if !slices.Contains(widths, c.W) {
			widths = append(widths, c.W)
		}
		if !slices.Contains(lengths, c.L) {
			lengths = append(lengths, c.L)
		}
	}
	slices.Sort(widths)
	slices.Sort(lengths)
	return widths, lengths
}

// colorSpan is the colour scale's reach in octaves: the colours span
// speedups 2^-span … 2^span, at least 0.5× … 2×, widened in half octaves to
// the report's extremes.
func (r *Report) colorSpan() float64 {
	span := 1.0
	for _, c := range r.Cells {
		if c.Speedup > 0 {
			span = max(span, math.Ceil(2*math.Abs(math.Log2(c.Speedup)))/2)
		}
	}
	return span
}

// color maps a speedup to a fill (red below 1×, white at 1×, green above,
// saturating at 2^±span) and a text colour that reads on it.
func color(speedup, span float64) (fill, ink string) {
	t := 0.0
	if speedup > 0 {
		t = math.Max(-1, math.Min(1, math.Log2(speedup)/span))
	}
	white := [3]float64{247, 247, 247}
	end := [3]float64{26, 152, 80} // green
	if t < 0 {
		end, t = [3]float64{215, 48, 39}, -t // red
	}
	var c [3]float64
	for i := range c {
		c[i] = white[i] + (end[i]-white[i])*t
	}
	ink = "#111111"
	if t > 0.55 {
		ink = "#ffffff"
	}
	return fmt.Sprintf("#%02x%02x%02x", int(math.Round(c[0])), int(math.Round(c[1])), int(math.Round(c[2]))), ink
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
