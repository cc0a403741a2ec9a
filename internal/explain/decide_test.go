package explain_test

import (
	"context"
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
		})
	}
	t.Logf("%d cases", len(cases))
}
