package explain_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/explain"
	"github.com/lockhttp/lockhttp/internal/explain/explaintest"
)

// corpus is the decide corpus: one case a file (testdata/decide/README.md).
const corpus = "testdata/decide"

// TestDecideCorpus decides every case of the corpus with explain.Request, the function
// lockhttp explain runs, in the case's environment, and holds the verdict, code, rule and
// reason to the case's -- want --. Adding a case is adding a file.
func TestDecideCorpus(t *testing.T) {
	cases, err := explaintest.Load(corpus)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			p, err := c.Prepare(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			res, err := explain.Request(context.Background(), p.Raw, p.Options)
			if err != nil {
				t.Fatalf("%s: explain refused the request: %v", c.File, err)
			}
			if err := c.Want.Check(res.Decision, res.Kind); err != nil {
				t.Errorf("%s: %v", c.File, err)
			}
			fp := ""
			if res.MCP != nil {
				fp = res.MCP.Fingerprint
			}
			if err := c.Want.CheckFingerprint(fp); err != nil {
				t.Errorf("%s: %v", c.File, err)
			}
		})
	}
	t.Logf("%d cases", len(cases))
}

// TestDecideCorpusReadme: the example README.md shows is a case of the corpus, as written.
func TestDecideCorpusReadme(t *testing.T) {
	readme, err := os.ReadFile(corpus + "/README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```\n")
	block, _, ok2 := strings.Cut(block, "```\n")
	if !ok || !ok2 {
		t.Fatal("README.md shows no example case")
	}
	file, err := os.ReadFile(corpus + "/example-github-token-in-query.txtar")
	if err != nil {
		t.Fatal(err)
	}
	if block != string(file) {
		t.Errorf("README.md's example is not example-github-token-in-query.txtar:\n%s\nthe file:\n%s", block, file)
	}
}
