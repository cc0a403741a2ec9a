package metrics

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The bounds of ParseText: a page over them is refused whole.
const (
	// MaxTextBytes bounds the page (a signer's is about 6 KiB).
	MaxTextBytes = 1 << 20
	// MaxTextSamples bounds the sample lines (a signer's page has about 60).
	MaxTextSamples = 4096
	// MaxTextLabels bounds the labels of one sample (lockhttp's families have at most 4).
	MaxTextLabels = 64
	// maxShownLine bounds how much of a bad line an error quotes.
	maxShownLine = 120
)

// ParseText reads a page in Prometheus's text format 0.0.4 (what Handler serves) into its
// families, in the page's order, each series' labels sorted by name. It refuses, with an error
// naming the line, a page over MaxTextBytes or MaxTextSamples, a sample over MaxTextLabels, a
// malformed line (a name, a
// label, an escape, a value or a timestamp), a second # HELP or # TYPE for a family, a # TYPE
// after the family's samples, a family whose samples are not together, a series twice, and a
// histogram without its +Inf bucket or whose counts go down. Other comments are skipped.
func ParseText(page []byte) ([]Family, error) {
	if len(page) > MaxTextBytes {
		return nil, fmt.Errorf("the page has %d bytes, over %d", len(page), MaxTextBytes)
	}
	p := &textParser{byName: map[string]*pfam{}}
	n := 0
	for len(page) > 0 {
		n++
		line := page
		if i := bytes.IndexByte(page, '\n'); i >= 0 {
			line, page = page[:i], page[i+1:]
		} else {
			page = nil
		}
		if err := p.line(string(line)); err != nil {
			return nil, fmt.Errorf("line %d: %w: %q", n, err, shorten(string(line)))
		}
	}
	return p.finish()
}

func shorten(s string) string {
	if len(s) > maxShownLine {
		return s[:maxShownLine] + "…"
	}
	return s
}

// pfam is a family being read.
type pfam struct {
	Family
	helpSet, typeSet bool
	samples          int
	series           map[string]*pseries // by the labels' key (le and quantile left out)
	order            []string            // the series' keys in the page's order
}

type pseries struct {
	line               int // the first sample's, for finish's errors
	labels             []Label
	set                bool // a counter's, gauge's or untyped series' value was read
	hasSum, hasCount   bool
	buckets            map[float64]float64 // le or quantile → count or value
	histCount, histSum float64
}

type textParser struct {
	fams    []*pfam
	byName  map[string]*pfam
	current *pfam // the family the last line was of
	samples int
	lineNo  int
}

func (p *textParser) line(s string) error {
	p.lineNo++
	s = strings.TrimLeft(s, " \t")
	if s == "" {
		return nil
	}
	if s[0] == '#' {
		return p.comment(s[1:])
	}
	return p.sample(s)
}

// comment reads # HELP and # TYPE lines; any other comment is skipped.
func (p *textParser) comment(s string) error {
	s = strings.TrimLeft(s, " \t")
	kw, rest, _ := cutBlank(s)
	if kw != "HELP" && kw != "TYPE" {
		return nil
	}
	name, rest, _ := cutBlank(strings.TrimLeft(rest, " \t"))
	if !validMetricName(name) {
		return fmt.Errorf("invalid family name %q in # %s", name, kw)
	}
	f := p.byName[name]
	if f == nil {
		f = p.newFamily(name)
	} else if f != p.current && f.samples > 0 {
		return fmt.Errorf("# %s for %s apart from its samples", kw, name)
	}
	p.current = f
	if kw == "HELP" {
		if f.helpSet {
			return fmt.Errorf("a second # HELP for %s", name)
		}
		help, err := unescape(rest, false)
		if err != nil {
			return err
		}
		f.Help, f.helpSet = help, true
		return nil
	}
	if f.typeSet {
		return fmt.Errorf("a second # TYPE for %s", name)
	}
	if f.samples > 0 {
		return fmt.Errorf("# TYPE for %s after its samples", name)
	}
	switch strings.TrimRight(rest, " \t") {
	case "counter":
		f.Type = Counter
	case "gauge":
		f.Type = Gauge
	case "histogram":
		f.Type = Histogram
	case "summary":
		f.Type = Summary
	case "untyped":
		f.Type = Untyped
	default:
		return fmt.Errorf("unknown type %q for %s", strings.TrimSpace(rest), name)
	}
	f.typeSet = true
	return nil
}

func (p *textParser) newFamily(name string) *pfam {
	f := &pfam{Family: Family{Name: name}, series: map[string]*pseries{}}
	p.fams = append(p.fams, f)
	p.byName[name] = f
	return f
}

// cutBlank splits s at its first space or tab.
func cutBlank(s string) (before, after string, found bool) {
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// sample reads name{labels} value [timestamp].
func (p *textParser) sample(s string) error {
	p.samples++
	if p.samples > MaxTextSamples {
		return fmt.Errorf("over %d samples", MaxTextSamples)
	}
	i := 0
	for i < len(s) && s[i] != '{' && s[i] != ' ' && s[i] != '\t' {
		i++
	}
	name := s[:i]
	if !validMetricName(name) {
		return fmt.Errorf("invalid metric name %q", name)
	}
	s = strings.TrimLeft(s[i:], " \t")
	var labels []Label
	if strings.HasPrefix(s, "{") {
		var err error
		if labels, s, err = parseLabels(s[1:]); err != nil {
			return err
		}
	}
	s = strings.TrimLeft(s, " \t")
	vs, rest, _ := cutBlank(s)
	if vs == "" {
		return fmt.Errorf("no value")
	}
	v, err := parseValue(vs)
	if err != nil {
		return err
	}
	if ts := strings.Trim(rest, " \t"); ts != "" {
		if _, err := strconv.ParseInt(ts, 10, 64); err != nil {
			return fmt.Errorf("invalid timestamp %q", ts)
		}
	}
	f, suffix := p.familyOf(name)
	if f != p.current && f.samples > 0 {
		return fmt.Errorf("a sample of %s apart from the family's others", f.Name)
	}
	p.current = f
	f.samples++
	return f.add(p.lineNo, suffix, labels, v)
}

// familyOf is the family a sample named name belongs to, and the suffix (_bucket, _sum, _count)
// it carries of a histogram or summary; a sample of no family declared starts an untyped one.
func (p *textParser) familyOf(name string) (*pfam, string) {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if f := p.byName[base]; f != nil && (f.Type == Histogram || f.Type == Summary && suf != "_bucket") {
				return f, suf
			}
		}
	}
	if f := p.byName[name]; f != nil {
		return f, ""
	}
	return p.newFamily(name), ""
}

// add counts one sample of f.
func (f *pfam) add(line int, suffix string, labels []Label, v float64) error {
	var special string // le or quantile
	switch {
	case f.Type == Histogram && suffix == "_bucket":
		special = "le"
	case f.Type == Summary && suffix == "":
		special = "quantile"
	case f.Type == Histogram && suffix == "":
		return fmt.Errorf("a sample named %s of histogram %s: want %s_bucket, _sum or _count", f.Name, f.Name, f.Name)
	}
	var bound float64
	if special != "" {
		i := slices.IndexFunc(labels, func(l Label) bool { return l.Name == special })
		if i < 0 {
			return fmt.Errorf("no %s label", special)
		}
		var err error
		if bound, err = parseValue(labels[i].Value); err != nil || math.IsNaN(bound) {
			return fmt.Errorf("invalid %s %q", special, labels[i].Value)
		}
		labels = slices.Delete(slices.Clone(labels), i, i+1)
		if len(labels) == 0 {
			labels = nil
		}
	} else if slices.ContainsFunc(labels, func(l Label) bool {
		return (f.Type == Histogram && l.Name == "le") || (f.Type == Summary && l.Name == "quantile")
	}) {
		return fmt.Errorf("a label %s on a %s sample of %s", map[Type]string{Histogram: "le", Summary: "quantile"}[f.Type], suffix, f.Name)
	}
	key := string(appendLabels(nil, labels, "", ""))
	s := f.series[key]
	if s == nil {
		s = &pseries{line: line, labels: labels}
		f.series[key] = s
		f.order = append(f.order, key)
	}
	twice := func() error { return fmt.Errorf("series %s%s%s twice", f.Name, suffix, key) }
	switch {
	case special != "":
		if s.buckets == nil {
			s.buckets = map[float64]float64{}
		}
		if _, dup := s.buckets[bound]; dup {
			return fmt.Errorf("series %s%s%s with %s %s twice", f.Name, suffix, key, special, formatFloat(bound))
		}
		if special == "le" {
			if _, err := count(v); err != nil {
				return err
			}
		}
		s.buckets[bound] = v
	case suffix == "_sum":
		if s.hasSum {
			return twice()
		}
		s.hasSum, s.histSum = true, v
	case suffix == "_count":
		if s.hasCount {
			return twice()
		}
		if _, err := count(v); err != nil {
			return err
		}
		s.hasCount, s.histCount = true, v
	default:
		if s.set {
			return twice()
		}
		s.set = true
		s.histSum = v
	}
	return nil
}

// count is v as a count: a whole number from 0 to 2^53.
func count(v float64) (uint64, error) {
	if v < 0 || v > 1<<53 || v != math.Trunc(v) {
		return 0, fmt.Errorf("invalid count %s", formatFloat(v))
	}
	return uint64(v), nil
}

// finish builds the families, checking each histogram's buckets.
func (p *textParser) finish() ([]Family, error) {
	out := make([]Family, 0, len(p.fams))
	for _, f := range p.fams {
		fam := f.Family
		fam.Series = make([]Series, 0, len(f.order))
		for _, key := range f.order {
			ps := f.series[key]
			s := Series{Labels: ps.labels}
			switch f.Type {
			case Histogram:
				inf, ok := ps.buckets[math.Inf(1)]
				if !ok {
					return nil, fmt.Errorf("line %d: histogram %s%s has no +Inf bucket", ps.line, f.Name, key)
				}
				bounds := make([]float64, 0, len(ps.buckets))
				for b := range ps.buckets {
					if !math.IsInf(b, 1) {
						bounds = append(bounds, b)
					}
				}
				slices.Sort(bounds)
				var last uint64
				for _, b := range bounds {
					c := uint64(ps.buckets[b])
					if c < last {
						return nil, fmt.Errorf("line %d: histogram %s%s: the bucket le=%q counts fewer than the one before", ps.line, f.Name, key, formatFloat(b))
					}
					last = c
					s.Buckets = append(s.Buckets, Bucket{Bound: b, Count: c})
				}
				s.Count = uint64(inf)
				if s.Count < last || ps.hasCount && ps.histCount != inf {
					return nil, fmt.Errorf("line %d: histogram %s%s: the +Inf bucket is not the count", ps.line, f.Name, key)
				}
				s.Sum = ps.histSum
			case Summary:
				qs := slices.Sorted(func(yield func(float64) bool) {
					for q := range ps.buckets {
						if !yield(q) {
							return
						}
					}
				})
				for _, q := range qs {
					s.Buckets = append(s.Buckets, Bucket{Bound: q, Value: ps.buckets[q]})
				}
				s.Count, s.Sum = uint64(ps.histCount), ps.histSum
			default:
				s.Value = ps.histSum
			}
			fam.Series = append(fam.Series, s)
		}
		out = append(out, fam)
	}
	return out, nil
}

// parseLabels reads a="x",b="y"} (the opening brace read), trailing comma allowed, and returns
// the labels sorted by name and what follows the closing brace.
func parseLabels(s string) ([]Label, string, error) {
	var ls []Label
	for {
		s = strings.TrimLeft(s, " \t")
		if strings.HasPrefix(s, "}") {
			break
		}
		i := 0
		for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z' || s[i] == '_' || i > 0 && s[i] >= '0' && s[i] <= '9') {
			i++
		}
		name := s[:i]
		if !validLabelName(name) {
			return nil, "", fmt.Errorf("invalid label name %q", name)
		}
		if len(ls) == MaxTextLabels {
			return nil, "", fmt.Errorf("over %d labels", MaxTextLabels)
		}
		if slices.ContainsFunc(ls, func(l Label) bool { return l.Name == name }) {
			return nil, "", fmt.Errorf("label %s twice", name)
		}
		s = strings.TrimLeft(s[i:], " \t")
		if !strings.HasPrefix(s, "=") {
			return nil, "", fmt.Errorf("label %s: no =", name)
		}
		s = strings.TrimLeft(s[1:], " \t")
		if !strings.HasPrefix(s, `"`) {
			return nil, "", fmt.Errorf("label %s: its value is not quoted", name)
		}
		end := -1
		for j := 1; j < len(s); j++ {
			if s[j] == '\\' {
				j++
				continue
			}
			if s[j] == '"' {
				end = j
				break
			}
		}
		if end < 0 {
			return nil, "", fmt.Errorf("label %s: its value has no closing quote", name)
		}
		v, err := unescape(s[1:end], true)
		if err != nil {
			return nil, "", fmt.Errorf("label %s: %w", name, err)
		}
		ls = append(ls, Label{name, v})
		s = strings.TrimLeft(s[end+1:], " \t")
		if strings.HasPrefix(s, ",") {
			s = s[1:]
			continue
		}
		if !strings.HasPrefix(s, "}") {
			return nil, "", fmt.Errorf("label %s: want , or } after its value", name)
		}
		break
	}
	slices.SortFunc(ls, func(a, b Label) int { return strings.Compare(a.Name, b.Name) })
	return ls, s[1:], nil
}

// unescape undoes the text format's escapes: \\ and \n, and \" in a label value. Any other
// escape, or a lone backslash at the end, is an error; so is invalid UTF-8.
func unescape(s string, quote bool) (string, error) {
	if !strings.ContainsRune(s, '\\') {
		if !utf8.ValidString(s) {
			return "", fmt.Errorf("invalid UTF-8")
		}
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		switch {
		case i == len(s):
			return "", fmt.Errorf("a backslash at the end")
		case s[i] == '\\':
			b.WriteByte('\\')
		case s[i] == 'n':
			b.WriteByte('\n')
		case s[i] == '"' && quote:
			b.WriteByte('"')
		default:
			return "", fmt.Errorf("invalid escape \\%c", s[i])
		}
	}
	if !utf8.ValidString(b.String()) {
		return "", fmt.Errorf("invalid UTF-8")
	}
	return b.String(), nil
}

// parseValue reads a sample's value: a decimal float, +Inf, -Inf or NaN.
func parseValue(s string) (float64, error) {
	switch s {
	case "+Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
			return 0, fmt.Errorf("invalid value %q", s)
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid value %q", s)
	}
	return v, nil
}
