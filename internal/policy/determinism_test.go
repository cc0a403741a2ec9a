package policy

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/lockhttp/lockhttp/internal/floor"
)

// loads is how many times TestOneTextOnePolicy compiles each policy. A choice left to the order
// of a map of two keys goes the other way in about one load of two, so 50 loads miss it with a
// chance of about 2^-49.
const loads = 50

// policyFiles are every policy text of the repository: testdata (good and bad), the shipped
// default and the compose policies.
func policyFiles(t testing.TB) (good, bad []string) {
	t.Helper()
	good, _ = filepath.Glob("testdata/good/*.toml")
	bad, _ = filepath.Glob("testdata/bad/*.toml")
	good = append(good, "../../policy/default.toml", "../../compose/policy.toml")
	if len(good) < 5 || len(bad) == 0 {
		t.Fatalf("no testdata: good %v, bad %v", good, bad)
	}
	return good, bad
}

// TestOneTextOnePolicy compiles every policy text many times: each load must give the same
// compiled policy and the same decisions, or the same errors in the same order.
func TestOneTextOnePolicy(t *testing.T) {
	good, bad := policyFiles(t)
	for _, f := range append(good, bad...) {
		wantErr := !slices.Contains(good, f)
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, err := loadDump(data)
			for i := 2; i <= loads; i++ {
				if got, _ := loadDump(data); got != first {
					t.Fatalf("load %d differs from load 1:\n%s", i, firstDifference(first, got))
				}
			}
			switch {
			case wantErr && err == nil:
				t.Fatal("loaded without error; want the errors of its # want: lines")
			case !wantErr && err != nil:
				t.Fatal(err)
			}
		})
	}
}

// loadDump loads a policy text and dumps the result: the errors, or the compiled policy and its
// decisions.
func loadDump(data []byte) (string, error) {
	p, err := Load("policy.toml", data)
	if err != nil {
		return err.Error(), err
	}
	var b strings.Builder
	dumpValue(&b, reflect.ValueOf(p), 0)
	dumpDecisions(&b, p)
	return b.String(), nil
}

// firstDifference shows the first line where two dumps differ, with a little context.
func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) && i < len(bl); i++ {
		if al[i] != bl[i] {
			from := max(0, i-3)
			return fmt.Sprintf("line %d\nload 1: %s\nload n: %s\n(before it:\n%s)", i+1, al[i], bl[i], strings.Join(al[from:i], "\n"))
		}
	}
	return fmt.Sprintf("one dump is longer: %d and %d lines", len(al), len(bl))
}

var stringers = map[reflect.Type]bool{
	reflect.TypeOf(netip.Addr{}):     true,
	reflect.TypeOf(netip.Prefix{}):   true,
	reflect.TypeOf(time.Duration(0)): true,
}

// dumpValue writes v, every field included (exported or not), with map keys sorted: two
// compiled policies with the same dump hold the same values. Pointers are followed; their
// addresses are not written.
func dumpValue(b *strings.Builder, v reflect.Value, depth int) {
	if depth > 40 {
		panic("dumpValue: too deep; is there a cycle?")
	}
	if stringers[v.Type()] {
		switch {
		case v.CanInterface():
			fmt.Fprintf(b, "%v", v.Interface())
			return
		case v.CanAddr(): // an unexported field: read it through its address
			fmt.Fprintf(b, "%v", reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem().Interface())
			return
		}
		// Neither: its contents are dumped below, as those of any struct.
	}
	ind := strings.Repeat("  ", depth)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			b.WriteString("nil")
			return
		}
		dumpValue(b, v.Elem(), depth)
	case reflect.Struct:
		fmt.Fprintf(b, "%s{\n", v.Type())
		for i := 0; i < v.NumField(); i++ {
			fmt.Fprintf(b, "%s  %s: ", ind, v.Type().Field(i).Name)
			dumpValue(b, v.Field(i), depth+1)
			b.WriteString("\n")
		}
		b.WriteString(ind + "}")
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			b.WriteString("nil")
			return
		}
		b.WriteString("[\n")
		for i := 0; i < v.Len(); i++ {
			b.WriteString(ind + "  ")
			dumpValue(b, v.Index(i), depth+1)
			b.WriteString("\n")
		}
		b.WriteString(ind + "]")
	case reflect.Map:
		if v.IsNil() {
			b.WriteString("nil")
			return
		}
		type entry struct{ k, v string }
		var es []entry
		for it := v.MapRange(); it.Next(); {
			var kb, vb strings.Builder
			dumpValue(&kb, it.Key(), depth+1)
			dumpValue(&vb, it.Value(), depth+1)
			es = append(es, entry{kb.String(), vb.String()})
		}
		sort.Slice(es, func(i, j int) bool { return es[i].k < es[j].k })
		b.WriteString("map[\n")
		for _, e := range es {
			fmt.Fprintf(b, "%s  %s: %s\n", ind, e.k, e.v)
		}
		b.WriteString(ind + "]")
	case reflect.String:
		fmt.Fprintf(b, "%q", v.String())
	case reflect.Bool:
		fmt.Fprintf(b, "%v", v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		fmt.Fprintf(b, "%d", v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		fmt.Fprintf(b, "%d", v.Uint())
	default:
		panic("dumpValue: cannot dump a " + v.Kind().String() + " (" + v.Type().String() + ")")
	}
}

// dumpDecisions writes what the policy decides for every host the file names (and a name under
// each wildcard), with the methods and paths its rules name: the decisions are what must not
// change from one load to the next.
func dumpDecisions(b *strings.Builder, p *Policy) {
	f := p.file
	var pats []string
	pats = append(pats, f.Trusted...)
	pats = append(pats, f.Deny...)
	pats = append(pats, f.Splice...)
	paths := []string{"/", "/x"}
	for _, r := range f.Rules {
		pats = append(pats, r.Hosts...)
		for _, pt := range r.Paths {
			paths = append(paths, strings.NewReplacer("**", "x/y", "*", "x").Replace(pt))
		}
	}
	for _, s := range f.Secrets {
		pats = append(pats, s.Hosts...)
	}
	for _, in := range f.Inject {
		pats = append(pats, in.Hosts...)
	}
	for name := range f.Floor.Hosts {
		pats = append(pats, name)
	}
	for _, sec := range f.Containers {
		pats = append(pats, sec.Trusted...)
		pats = append(pats, sec.Deny...)
	}
	hostSet := map[string]bool{"unnamed.example.org": true}
	for _, pt := range pats {
		if pt == "*" {
			continue
		}
		name, wild := strings.CutPrefix(pt, "*.")
		norm, r := floor.Host(name)
		if r != nil {
			continue
		}
		hostSet[norm] = true
		if wild {
			hostSet["sub."+norm] = true
		}
	}
	hosts := make([]string, 0, len(hostSet))
	for h := range hostSet {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	sort.Strings(paths)
	fmt.Fprintf(b, "\ncontainers %v\n", sortedCopy(p.Containers()))
	// Each container of [sources], and one it does not name.
	for _, ct := range append(p.Containers(), "") {
		fmt.Fprintf(b, "container %q\n", ct)
		for _, h := range hosts {
			in := ""
			if inj := p.InjectionFor(h); inj != nil {
				in = inj.Name
			}
			addr, mapped := p.Floor.Hosts[h]
			fmt.Fprintf(b, "%s: trusted %v spliced %v inject %q floor %v %v connect %+v intercept %+v\n", h,
				p.Trusted(h, ct), p.Spliced(h), in, addr, mapped,
				p.Evaluate(Request{Host: h, Method: "CONNECT", Connect: true, Container: ct}), p.EvaluateIntercept(h, ct))
			for _, m := range []string{"GET", "POST", "DELETE"} {
				for _, pt := range paths {
					fmt.Fprintf(b, "  %s %s: %+v\n", m, pt, p.Evaluate(Request{Host: h, Method: m, Path: pt, Container: ct}))
				}
			}
		}
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// FuzzLoadIsDeterministic loads any text a few times: the loads must agree, whether they give a
// policy or errors. The policies of the repository are the seeds.
func FuzzLoadIsDeterministic(f *testing.F) {
	good, bad := policyFiles(f)
	for _, name := range append(good, bad...) {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		first, _ := loadDump(data)
		for i := 2; i <= 4; i++ {
			if got, _ := loadDump(data); got != first {
				t.Fatalf("load %d differs from load 1:\n%s", i, firstDifference(first, got))
			}
		}
	})
}
