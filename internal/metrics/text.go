package metrics

import (
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// WriteText writes fams in Prometheus's text format 0.0.4: for each family its # HELP (unless
// its help is empty) and # TYPE lines and its samples; a histogram's as _bucket{le=…} (cumulative, +Inf last), _sum
// and _count, a summary's as {quantile=…}, _sum and _count. Help text and label values are
// escaped (backslash, newline, and a label value's double quote); invalid UTF-8 is written as
// U+FFFD.
func WriteText(w io.Writer, fams []Family) error {
	var b []byte
	for _, f := range fams {
		b = b[:0]
		if f.Help != "" {
			b = append(b, "# HELP "...)
			b = append(b, f.Name...)
			b = append(b, ' ')
			b = appendEscaped(b, f.Help, false)
			b = append(b, '\n')
		}
		b = append(b, "# TYPE "...)
		b = append(b, f.Name...)
		b = append(b, ' ')
		b = append(b, f.Type.String()...)
		b = append(b, '\n')
		for _, s := range f.Series {
			switch f.Type {
			case Histogram:
				for _, bk := range s.Buckets {
					b = appendSample(b, f.Name, "_bucket", s.Labels, "le", formatFloat(bk.Bound), float64(bk.Count))
				}
				b = appendSample(b, f.Name, "_bucket", s.Labels, "le", "+Inf", float64(s.Count))
				b = appendSample(b, f.Name, "_sum", s.Labels, "", "", s.Sum)
				b = appendSample(b, f.Name, "_count", s.Labels, "", "", float64(s.Count))
			case Summary:
				for _, q := range s.Buckets {
					b = appendSample(b, f.Name, "", s.Labels, "quantile", formatFloat(q.Bound), q.Value)
				}
				b = appendSample(b, f.Name, "_sum", s.Labels, "", "", s.Sum)
				b = appendSample(b, f.Name, "_count", s.Labels, "", "", float64(s.Count))
			default:
				b = appendSample(b, f.Name, "", s.Labels, "", "", s.Value)
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// appendSample appends one sample line: name+suffix, the labels with extra="extraValue" last
// when extra is not empty, and v.
func appendSample(b []byte, name, suffix string, ls []Label, extra, extraValue string, v float64) []byte {
	b = append(b, name...)
	b = append(b, suffix...)
	b = appendLabels(b, ls, extra, extraValue)
	b = append(b, ' ')
	b = appendFloat(b, v)
	return append(b, '\n')
}

// appendLabels appends {a="x",b="y"} (nothing for no label).
func appendLabels(b []byte, ls []Label, extra, extraValue string) []byte {
	if len(ls) == 0 && extra == "" {
		return b
	}
	b = append(b, '{')
	for i, l := range ls {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, l.Name...)
		b = append(b, `="`...)
		b = appendEscaped(b, l.Value, true)
		b = append(b, '"')
	}
	if extra != "" {
		if len(ls) > 0 {
			b = append(b, ',')
		}
		b = append(b, extra...)
		b = append(b, `="`...)
		b = append(b, extraValue...)
		b = append(b, '"')
	}
	return append(b, '}')
}

// appendEscaped appends s with \ and newline escaped, and " too in a label value.
func appendEscaped(b []byte, s string, quote bool) []byte {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '"' && quote:
			b = append(b, `\"`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendFloat appends v as the text format writes a value: +Inf, -Inf, NaN, or Go's shortest
// representation.
func appendFloat(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

func formatFloat(v float64) string { return string(appendFloat(nil, v)) }
