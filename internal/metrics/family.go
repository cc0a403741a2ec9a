package metrics

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Type is a family's type, as its # TYPE line names it.
type Type uint8

// The types of the text format 0.0.4.
const (
	Untyped Type = iota
	Counter
	Gauge
	Histogram
	Summary
)

func (t Type) String() string {
	switch t {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	case Histogram:
		return "histogram"
	case Summary:
		return "summary"
	}
	return "untyped"
}

// Family is one metric family as a scrape reads it: what Registry.Gather returns and the text
// format carries.
type Family struct {
	Name, Help string
	Type       Type
	Series     []Series
}

// Series is one series of a family: its labels and its value (a counter, gauge or untyped
// family), its buckets (a histogram) or its quantiles (a summary).
type Series struct {
	Labels []Label
	// Value is a counter's, gauge's or untyped sample's value.
	Value float64
	// Buckets are a histogram's upper bounds with their cumulative counts, in increasing order,
	// without +Inf (whose count is Count); a summary's quantiles with their values.
	Buckets []Bucket
	// Count and Sum are a histogram's or summary's _count and _sum.
	Count uint64
	Sum   float64
}

// Label is one label of a series.
type Label struct{ Name, Value string }

// Bucket is a histogram's upper bound (le) and its cumulative count, or a summary's quantile
// (Bound) and its value (Value).
type Bucket struct {
	Bound float64
	Count uint64
	Value float64
}

// Label returns the value of the series' label name ("" when it has none).
func (s Series) Label(name string) string {
	for _, l := range s.Labels {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}

// Find returns the family named name in fams, or nil.
func Find(fams []Family, name string) *Family {
	for i := range fams {
		if fams[i].Name == name {
			return &fams[i]
		}
	}
	return nil
}

// collector adds the families it holds to a scrape.
type collector interface {
	collect(out []Family) []Family
}

// collectFunc is a collector of its own making (a gauge read at scrape time, the gate's request
// counts).
type collectFunc func(out []Family) []Family

func (f collectFunc) collect(out []Family) []Family { return f(out) }

// desc is what a family is declared with.
type desc struct {
	name, help string
	typ        Type
	labels     []string
}

func newDesc(name, help string, typ Type, labels ...string) desc {
	if !validMetricName(name) {
		panic(fmt.Sprintf("metrics: invalid family name %q", name))
	}
	for _, l := range labels {
		if !validLabelName(l) || l == "le" || l == "quantile" {
			panic(fmt.Sprintf("metrics: family %s: invalid label name %q", name, l))
		}
	}
	return desc{name: name, help: help, typ: typ, labels: labels}
}

func (d desc) family(n int) Family {
	return Family{Name: d.name, Help: d.help, Type: d.typ, Series: make([]Series, 0, n)}
}

// labelsOf pairs d's label names with values, sorted by name (as Prometheus's client writes
// them).
func (d desc) labelsOf(values []string) []Label {
	if len(values) != len(d.labels) {
		panic(fmt.Sprintf("metrics: family %s takes %d label values, got %d", d.name, len(d.labels), len(values)))
	}
	if len(values) == 0 {
		return nil
	}
	ls := make([]Label, len(values))
	for i, v := range values {
		ls[i] = Label{d.labels[i], v}
	}
	if len(ls) > 1 {
		slices.SortFunc(ls, func(a, b Label) int { return strings.Compare(a.Name, b.Name) })
	}
	return ls
}

// counter is a count that only goes up; its methods are atomic.
type counter struct{ v atomic.Uint64 }

func (c *counter) Inc()          { c.v.Add(1) }
func (c *counter) Add(n uint64)  { c.v.Add(n) }
func (c *counter) value() uint64 { return c.v.Load() }

// gauge is a value set at will; its methods are atomic.
type gauge struct{ bits atomic.Uint64 }

func (g *gauge) Set(v float64)  { g.bits.Store(math.Float64bits(v)) }
func (g *gauge) value() float64 { return math.Float64frombits(g.bits.Load()) }

// histogram counts observations into fixed buckets without a lock: one atomic add for the
// bucket, one compare-and-swap loop for the sum.
type histogram struct {
	bounds []float64       // increasing upper bounds; the last bucket (+Inf) has none
	counts []atomic.Uint64 // len(bounds)+1, not cumulative
	sum    atomic.Uint64   // float64 bits
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// Observe counts v.
func (h *histogram) Observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// series is h as a series: the buckets cumulative, Count the +Inf bucket's.
func (h *histogram) series(labels []Label) Series {
	s := Series{Labels: labels, Buckets: make([]Bucket, len(h.bounds))}
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i].Load()
		s.Buckets[i] = Bucket{Bound: b, Count: cum}
	}
	s.Count = cum + h.counts[len(h.bounds)].Load()
	s.Sum = math.Float64frombits(h.sum.Load())
	return s
}

// vec is a family with labels: one child per combination of label values, made on first use.
type vec[T any] struct {
	desc
	make func() *T

	mu       sync.RWMutex
	children map[string]*child[T] // guarded by mu; key: the values joined by \xff
}

type child[T any] struct {
	values []string
	m      *T
}

func newVec[T any](d desc, mk func() *T) *vec[T] {
	return &vec[T]{desc: d, make: mk, children: map[string]*child[T]{}}
}

// WithLabelValues returns the child of values, made on first use; keep it to count without a
// lookup.
func (v *vec[T]) WithLabelValues(values ...string) *T {
	if len(values) != len(v.labels) {
		panic(fmt.Sprintf("metrics: family %s takes %d label values, got %d", v.name, len(v.labels), len(values)))
	}
	key := strings.Join(values, "\xff")
	v.mu.RLock()
	c, ok := v.children[key]
	v.mu.RUnlock()
	if ok {
		return c.m
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c, ok := v.children[key]; ok {
		return c.m
	}
	c = &child[T]{values: slices.Clone(values), m: v.make()}
	v.children[key] = c
	return c.m
}

// Reset forgets every child.
func (v *vec[T]) Reset() {
	v.mu.Lock()
	v.children = map[string]*child[T]{}
	v.mu.Unlock()
}

// each calls f with each child, under the read lock.
func (v *vec[T]) each(f func(values []string, m *T)) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, c := range v.children {
		f(c.values, c.m)
	}
}

func (v *vec[T]) size() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.children)
}

type counterVec struct{ *vec[counter] }

func (v counterVec) collect(out []Family) []Family {
	f := v.family(v.size())
	v.each(func(values []string, c *counter) {
		f.Series = append(f.Series, Series{Labels: v.labelsOf(values), Value: float64(c.value())})
	})
	return append(out, f)
}

type gaugeVec struct{ *vec[gauge] }

func (v gaugeVec) collect(out []Family) []Family {
	f := v.family(v.size())
	v.each(func(values []string, g *gauge) {
		f.Series = append(f.Series, Series{Labels: v.labelsOf(values), Value: g.value()})
	})
	return append(out, f)
}

type histogramVec struct{ *vec[histogram] }

func (v histogramVec) collect(out []Family) []Family {
	f := v.family(v.size())
	v.each(func(values []string, h *histogram) {
		f.Series = append(f.Series, h.series(v.labelsOf(values)))
	})
	return append(out, f)
}

// newCounter registers a counter family of one series in r.
func (r *Registry) newCounter(name, help string) *counter {
	c := &counter{}
	d := newDesc(name, help, Counter)
	r.register([]string{name}, collectFunc(func(out []Family) []Family {
		f := d.family(1)
		f.Series = append(f.Series, Series{Value: float64(c.value())})
		return append(out, f)
	}))
	return c
}

// newGauge registers a gauge family of one series in r.
func (r *Registry) newGauge(name, help string) *gauge {
	g := &gauge{}
	d := newDesc(name, help, Gauge)
	r.register([]string{name}, collectFunc(func(out []Family) []Family {
		f := d.family(1)
		f.Series = append(f.Series, Series{Value: g.value()})
		return append(out, f)
	}))
	return g
}

// newGaugeFunc registers a gauge family of one series whose value read reads at each scrape.
func (r *Registry) newGaugeFunc(name, help string, read func() float64) {
	d := newDesc(name, help, Gauge)
	r.register([]string{name}, collectFunc(func(out []Family) []Family {
		f := d.family(1)
		f.Series = append(f.Series, Series{Value: read()})
		return append(out, f)
	}))
}

// newHistogram registers a histogram family of one series in r.
func (r *Registry) newHistogram(name, help string, buckets []float64) *histogram {
	h := newHistogram(checkBuckets(name, buckets))
	d := newDesc(name, help, Histogram)
	r.register([]string{name}, collectFunc(func(out []Family) []Family {
		f := d.family(1)
		f.Series = append(f.Series, h.series(nil))
		return append(out, f)
	}))
	return h
}

func (r *Registry) newCounterVec(name, help string, labels ...string) counterVec {
	v := counterVec{newVec(newDesc(name, help, Counter, labels...), func() *counter { return &counter{} })}
	r.register([]string{name}, v)
	return v
}

func (r *Registry) newGaugeVec(name, help string, labels ...string) gaugeVec {
	v := gaugeVec{newVec(newDesc(name, help, Gauge, labels...), func() *gauge { return &gauge{} })}
	r.register([]string{name}, v)
	return v
}

func (r *Registry) newHistogramVec(name, help string, buckets []float64, labels ...string) histogramVec {
	buckets = checkBuckets(name, buckets)
	v := histogramVec{newVec(newDesc(name, help, Histogram, labels...), func() *histogram { return newHistogram(buckets) })}
	r.register([]string{name}, v)
	return v
}

// checkBuckets panics unless buckets increase strictly and are finite.
func checkBuckets(name string, buckets []float64) []float64 {
	for i, b := range buckets {
		if math.IsInf(b, 0) || math.IsNaN(b) || (i > 0 && b <= buckets[i-1]) {
			panic(fmt.Sprintf("metrics: family %s: buckets must increase and be finite: %v", name, buckets))
		}
	}
	return buckets
}

// exponentialBuckets is count bounds from start, each factor times the one before.
func exponentialBuckets(start, factor float64, count int) []float64 {
	b := make([]float64, count)
	for i := range b {
		b[i] = start
		start *= factor
	}
	return b
}

// validMetricName reports whether name matches [a-zA-Z_:][a-zA-Z0-9_:]*.
func validMetricName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// validLabelName reports whether name matches [a-zA-Z_][a-zA-Z0-9_]* and is not reserved (__…).
func validLabelName(name string) bool {
	if name == "" || strings.HasPrefix(name, "__") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
