package console

import (
	"fmt"
	"strings"
)

// maxDiffLines bounds the diff a review shows (policy files are small; a huge one is shown cut).
const maxDiffLines = 2000

// lineDiff returns a unified-style diff of before against after ("-" removed, "+" added, " " kept), with
// up to three lines of context around each change.
func lineDiff(before, after string) string {
	x, y := strings.Split(before, "\n"), strings.Split(after, "\n")
	if len(x) > maxDiffLines || len(y) > maxDiffLines {
		return fmt.Sprintf("(the files have %d and %d lines; the diff is not shown)\n", len(x), len(y))
	}
	// Longest common subsequence, by dynamic programming over the (small) files.
	n, m := len(x), len(y)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type line struct {
		op   byte
		text string
	}
	var ops []line
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && x[i] == y[j]:
			ops = append(ops, line{' ', x[i]})
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			ops = append(ops, line{'+', y[j]})
			j++
		default:
			ops = append(ops, line{'-', x[i]})
			i++
		}
	}
	var b strings.Builder
	const context = 3
	last := -1
	for k, op := range ops {
		if op.op == ' ' {
			continue
		}
		start := max(k-context, last+1)
		if last >= 0 && start > last+1 {
			b.WriteString("  ...\n")
		}
		for c := start; c < k; c++ {
			if ops[c].op == ' ' {
				fmt.Fprintf(&b, "  %s\n", ops[c].text)
			}
		}
		fmt.Fprintf(&b, "%c %s\n", op.op, op.text)
		last = k
		// Context after: printed when the next change is far or there is none.
		next := k + 1
		for next < len(ops) && ops[next].op == ' ' {
			next++
		}
		if next >= len(ops) || next-k > 2*context {
			for c := k + 1; c < len(ops) && c <= k+context && ops[c].op == ' '; c++ {
				fmt.Fprintf(&b, "  %s\n", ops[c].text)
				last = c
			}
		}
	}
	return b.String()
}
