package policy

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// Error is one problem in a policy file: where it is, which key, and what to do about it.
type Error struct {
	File string // the file's name as given to Decode
	Line int    // 1-based; 0 when no line is known
	Key  string // e.g. `settings.hold` or `rule "gh-push" methods`
	Msg  string // what is wrong and the fix
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one file, in file order.
type Errors []*Error

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// maxErrors bounds how many problems one load reports.
const maxErrors = 20

// Document is a decoded policy file: the file's values, its name and text, and where its keys are.
type Document struct {
	File File
	Name string // how errors refer to the file (its path)
	Text []byte
	loc  *locator
	// failed are the paths (as the locator names them) of the values that did not decode: their
	// fields are left zero, so what Compile finds under them is not reported.
	failed [][]string
}

// Decode reads a policy file strictly: TOML syntax, types, unknown keys (a key spelled in
// another case is one) and the version. The errors come in file order, the same on every load.
// It does not check values; see Validate, and Load, which reports the problems of both at once.
func Decode(name string, data []byte) (*Document, error) {
	doc, errs := decode(name, data)
	if len(errs) > 0 {
		return nil, report(errs)
	}
	return doc, nil
}

// decode reads a policy file as Decode does, but returns the document even when some of its
// values did not decode (they are left zero and listed in failed), so that Load can check the
// rest in the same pass. It returns no document when nothing more can be read: the TOML does not
// parse, or the file is of a version this lockhttp does not read.
func decode(name string, data []byte) (*Document, Errors) {
	src := string(data)
	loc := newLocator(src)
	doc := &Document{Name: name, Text: data, loc: loc}
	var errs Errors
	md, err := toml.Decode(src, &doc.File)
	var undecoded []toml.Key
	if err != nil {
		var ok bool
		if md, errs, ok = decodeValues(doc, err); !ok {
			return nil, errs
		}
		undecoded = unknownKeys(md)
	} else {
		undecoded = md.Undecoded()
	}
	seen := make(map[string]int)
	for _, k := range undecoded {
		path := []string(k)
		n := seen[k.String()]
		seen[k.String()] = n + 1
		line := loc.plainLine(path, n)
		if line == 0 {
			line = loc.line(path...)
		}
		errs = append(errs, &Error{File: name, Line: line, Key: k.String(),
			Msg: "unknown key; " + knownKeys(path)})
	}
	errs = append(errs, checkKeys(name, md, loc)...)
	f := &doc.File
	switch {
	case !md.IsDefined("version"):
		errs = append(errs, &Error{File: name, Line: 1, Key: "version",
			Msg: "missing; start the file with version = 1"})
	case f.Version != 1 && !doc.failedAt([]string{"version"}):
		// Another version's keys may mean other things: checking them as version 1's would
		// only mislead.
		errs = append(errs, &Error{File: name, Line: loc.line("version"), Key: "version",
			Msg: fmt.Sprintf("%d is not supported; this lockhttp reads version = 1", f.Version)})
		return nil, errs
	}
	if err == nil && len(errs) > 0 {
		// The decoder fills a field from either of two spellings of its key ("verdict" and
		// "Verdict"), in the order of a map: the values are read again key by key, in file
		// order, a field so spelled twice left zero, so that what Compile checks next is the
		// same on every load.
		if _, verrs, _ := decodeValues(doc, nil); len(verrs) > 0 {
			return nil, append(errs, verrs...) // not reached: the values decoded once already
		}
	}
	return doc, errs
}

// failedAt reports whether path is at or under a value that did not decode.
func (d *Document) failedAt(path []string) bool {
	for _, f := range d.failed {
		if len(f) <= len(path) && slices.Equal(f, path[:len(f)]) {
			return true
		}
	}
	return false
}

// inFileOrder sorts errors by line (keeping the order of those on one line) and drops repeats.
func inFileOrder(errs Errors) Errors {
	sorted := append(Errors(nil), errs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Line < sorted[j].Line })
	out := sorted[:0]
	for i, e := range sorted {
		if i > 0 && *e == *sorted[i-1] {
			continue // one problem found twice (a value that is not a table, by two checks)
		}
		out = append(out, e)
	}
	return out
}

// report is the error of a load that found errs: the problems in file order, at most maxErrors
// of them, then how many more there are.
func report(errs Errors) Errors {
	all := inFileOrder(errs)
	if n := len(all) - maxErrors; n > 0 {
		all = append(all[:maxErrors:maxErrors], &Error{File: all[0].File,
			Msg: fmt.Sprintf("and %d more problems not shown; fix these and check again", n)})
	}
	return all
}

// checkKeys finds what the TOML decoder lets through though the file is not as written in
// docs/policy.md:
//
//   - keys spelled otherwise than the file's keys: the decoder matches a key to a field ignoring
//     case (and by Unicode case folding), so "Verdict" is read as "verdict", and two such keys of
//     one table ("verdict" and "Verdict") would both be read, in the order of a map: one text
//     would give two policies;
//   - a value that is not a table where a table of names is expected ([sources],
//     [floor.hosts]), which the decoder reads as an empty table.
func checkKeys(name string, md toml.MetaData, loc *locator) Errors {
	var errs Errors
	defined := make(map[string]bool)
	for _, k := range md.Keys() {
		defined[k.String()] = true
	}
	seen := make(map[string]int)
	// report names the n-th occurrence of path, at the line of the key or table it is, or else
	// of the key full under it.
	report := func(path, full []string, msg string) {
		k := toml.Key(path).String()
		n := seen[k]
		seen[k] = n + 1
		line := loc.plainLine(path, n)
		if line == 0 {
			line = loc.line(append(append([]string{}, path...), itoa(n))...) // [[x]]
		}
		if line == 0 {
			line = loc.line(full...)
		}
		errs = append(errs, &Error{File: name, Line: line, Key: k, Msg: msg})
	}
	for _, k := range md.Keys() {
		path := []string(k)
		t := reflect.TypeOf(File{})
		i := 0
		for ; i < len(path); i++ {
			for t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct {
				t = t.Elem() // an array of tables
			}
			if t.Kind() == reflect.Map {
				t = t.Elem() // a name of your choice
				continue
			}
			if t.Kind() != reflect.Struct || isText(t) {
				break
			}
			if f, ok := fieldByTag(t, path[i]); ok {
				t = f.Type
				continue
			}
			// Report a misspelled key once: where it is written, or where the first key under
			// it is when it is only implied (the "Floor" of [Floor.hosts]).
			prefix := path[:i+1]
			if f, ok := fieldByFold(t, path[i]); ok && (i == len(path)-1 || !defined[toml.Key(prefix).String()] && seen[toml.Key(prefix).String()] == 0) {
				report(prefix, path, fmt.Sprintf("unknown key; write %q (keys are spelled as in docs/policy.md, in lower case)", f.Tag.Get("toml")))
			}
			break
		}
		if i == len(path) && t.Kind() == reflect.Map && md.Type(path...) != "Hash" {
			typ, ok := goTypes[md.Type(path...)]
			if !ok {
				typ = strings.ToLower(md.Type(path...))
			}
			report(path, path, fmt.Sprintf("wrong type: the value is %s; it must be %s", typ, wantType(path)))
		}
	}
	return errs
}

// goTypes names TOML types as the decoder's errors do.
var goTypes = map[string]string{"Integer": "int64", "Float": "float64", "String": "string", "Bool": "bool"}

// decodeValues decodes the document again after the TOML decoder failed with err (or, with a nil
// err, after it found keys it should not have read), to find every value that does not decode
// rather than the one it stopped at. The decoder stops at the
// first value it cannot store, and it takes the keys of a table in the order of a map, so which
// value it names would change from one load to the next. A syntax error is reported as the
// decoder gives it (the parser reads in file order): nothing more can be read, and ok is false.
// Otherwise the values are decoded one key at a time, in file order, into doc.File: each that
// does not decode is reported, left zero and listed in doc.failed, and the rest are filled, so
// the file's other problems can be found in the same pass. md is the document's metadata.
func decodeValues(doc *Document, err error) (md toml.MetaData, errs Errors, ok bool) {
	var top map[string]toml.Primitive
	md, perr := toml.Decode(string(doc.Text), &top)
	if perr != nil {
		return md, Errors{tomlError(doc.Name, perr)}, false
	}
	doc.File = File{}
	v := valueDecoder{md: md, name: doc.Name, loc: doc.loc}
	v.table(top, reflect.ValueOf(&doc.File).Elem(), nil, nil)
	if len(v.errs) == 0 && err != nil {
		return md, Errors{tomlError(doc.Name, err)}, false // not found again: the decoder's own word
	}
	doc.failed = v.failed
	return md, v.errs, true
}

// unknownKeys are the keys of md that no field of File takes, as the decoder matches keys to
// fields (by tag, ignoring case): what md.Undecoded gives after a decode that finished, for one
// that did not.
func unknownKeys(md toml.MetaData) []toml.Key {
	var out []toml.Key
	for _, k := range md.Keys() {
		t := reflect.TypeOf(File{})
		for _, p := range k {
			for t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct {
				t = t.Elem() // an array of tables
			}
			if t.Kind() == reflect.Map {
				t = t.Elem() // a name of your choice
				continue
			}
			if t.Kind() != reflect.Struct || isText(t) {
				break
			}
			f, ok := fieldByTag(t, p)
			if !ok {
				f, ok = fieldByFold(t, p)
			}
			if !ok {
				out = append(out, k)
				break
			}
			t = f.Type
		}
	}
	return out
}

// valueDecoder decodes the values of a document key by key, in file order, to find those that
// do not decode and to fill the others.
type valueDecoder struct {
	md     toml.MetaData
	name   string
	loc    *locator
	errs   Errors
	failed [][]string // the paths of the values that did not decode
}

// table decodes the keys of one table into rv, a struct or a map. path is where the table is,
// with the indexes of arrays of tables (as the locator names lines); key is its name, without
// them (as the decoder names keys).
func (v *valueDecoder) table(prims map[string]toml.Primitive, rv reflect.Value, path, key []string) {
	keys := make([]string, 0, len(prims))
	for k := range prims {
		keys = append(keys, k)
	}
	at := func(p []string, k string) []string { return append(append([]string{}, p...), k) }
	sort.Slice(keys, func(i, j int) bool {
		if li, lj := v.loc.line(at(path, keys[i])...), v.loc.line(at(path, keys[j])...); li != lj {
			return li < lj
		}
		return keys[i] < keys[j]
	})
	t := rv.Type()
	if t.Kind() == reflect.Map && rv.IsNil() {
		rv.Set(reflect.MakeMap(t))
	}
	// A field written under two spellings of its key is left zero (the caller reports the
	// spellings): which one the decoder took would be up to the order of a map.
	spelled := map[int]int{}
	if t.Kind() == reflect.Struct {
		for _, k := range keys {
			if f, ok := fieldByFold(t, k); ok {
				spelled[f.Index[0]]++
			}
		}
	}
	for _, k := range keys {
		switch t.Kind() {
		case reflect.Map:
			elem := reflect.New(t.Elem()).Elem()
			if v.value(prims[k], elem, at(path, k), at(key, k)) {
				rv.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), elem)
			}
		case reflect.Struct:
			f, ok := fieldByTag(t, k)
			if !ok {
				f, ok = fieldByFold(t, k) // as the decoder matches it
			}
			if !ok {
				continue // an unknown key: reported by the caller
			}
			if spelled[f.Index[0]] > 1 {
				v.failed = append(v.failed, at(path, f.Tag.Get("toml")))
				continue
			}
			v.value(prims[k], rv.FieldByIndex(f.Index), at(path, k), at(key, k))
		}
	}
}

// value decodes one value into rv, descending into tables and arrays of tables. It reports
// whether the value decoded; one that did not is left zero.
func (v *valueDecoder) value(p toml.Primitive, rv reflect.Value, path, key []string) bool {
	t := rv.Type()
	switch {
	case t.Kind() == reflect.Map, t.Kind() == reflect.Struct && !isText(t):
		var data any
		if err := v.md.PrimitiveDecode(p, &data); err != nil {
			return v.fail(rv, path, key, err)
		}
		if _, ok := data.(map[string]any); !ok {
			// The decoder reads a value that is not a table as an empty table of names.
			return v.fail(rv, path, key, fmt.Errorf("incompatible types: TOML value has type %T; destination has type %s", data, t))
		}
		var sub map[string]toml.Primitive
		if err := v.md.PrimitiveDecode(p, &sub); err != nil {
			return v.fail(rv, path, key, err)
		}
		v.table(sub, rv, path, key)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		var elems []map[string]toml.Primitive
		if err := v.md.PrimitiveDecode(p, &elems); err != nil {
			return v.fail(rv, path, key, err)
		}
		rv.Set(reflect.MakeSlice(t, len(elems), len(elems)))
		for i, e := range elems {
			v.table(e, rv.Index(i), append(append([]string{}, path...), itoa(i)), key)
		}
	default:
		if err := v.md.PrimitiveDecode(p, rv.Addr().Interface()); err != nil {
			return v.fail(rv, path, key, err)
		}
	}
	return true
}

// fail records the error of the value at path (named key) and leaves rv, where it was to go,
// zero. It returns false.
func (v *valueDecoder) fail(rv reflect.Value, path, plain []string, err error) bool {
	rv.Set(reflect.Zero(rv.Type()))
	v.failed = append(v.failed, path)
	key := toml.Key(plain)
	msg := err.Error()
	var pe toml.ParseError
	if errors.As(err, &pe) {
		msg = pe.Message // an UnmarshalText error: ours, with its fix
	} else if prefix := fmt.Sprintf("(last key %q): ", key); strings.Contains(msg, prefix) {
		msg = msg[strings.Index(msg, prefix)+len(prefix):]
	} else {
		msg = strings.TrimPrefix(msg, "toml: ")
	}
	v.errs = append(v.errs, &Error{File: v.name, Line: v.loc.line(path...), Key: key.String(), Msg: friendlyTOML(msg, plain)})
	return false
}

var textUnmarshaler = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()

// isText reports whether the file type t is read from a value rather than a table (Duration,
// Size).
func isText(t reflect.Type) bool { return reflect.PointerTo(t).Implements(textUnmarshaler) }

// fieldByFold finds the field that the TOML decoder would fill from key: its tag, ignoring case.
func fieldByFold(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		if tag := t.Field(i).Tag.Get("toml"); tag != "" && strings.EqualFold(tag, key) {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

var tomlTypeErr = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key "([^"]*)"\): (.*)$`)

// tomlError turns an error of the TOML decoder into an Error with a line, a key and a fix.
func tomlError(name string, err error) *Error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return &Error{File: name, Line: pe.Position.Line, Key: pe.LastKey, Msg: friendlyTOML(pe.Message, strings.Split(pe.LastKey, "."))}
	}
	if m := tomlTypeErr.FindStringSubmatch(err.Error()); m != nil {
		line := 0
		fmt.Sscan(m[1], &line)
		return &Error{File: name, Line: line, Key: m[2], Msg: friendlyTOML(m[3], strings.Split(m[2], "."))}
	}
	return &Error{File: name, Msg: strings.TrimPrefix(err.Error(), "toml: ")}
}

var destType = regexp.MustCompile(`; destination has type .*$`)

// friendlyTOML rewords the decoder's message; for a type mismatch it says what the key at path
// takes.
func friendlyTOML(msg string, path []string) string {
	if !strings.Contains(msg, "incompatible types") {
		return msg
	}
	msg = strings.Replace(msg, "incompatible types: TOML value has type", "wrong type: the value is", 1)
	msg = strings.Replace(msg, "the value is []interface {}", "the value is an array", 1)
	return destType.ReplaceAllString(msg, "; it must be "+wantType(path))
}

// wantType describes in words the type a key of the file takes.
func wantType(path []string) string {
	t := reflect.TypeOf(File{})
	for _, p := range path {
		for t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Struct:
			f, ok := fieldByTag(t, p)
			if !ok {
				return "what docs/policy.md says"
			}
			t = f.Type
		case reflect.Map:
			t = t.Elem()
		default:
			return "what docs/policy.md says"
		}
	}
	switch t {
	case reflect.TypeOf(""):
		return "a string"
	case reflect.TypeOf([]string{}):
		return "an array of strings"
	case reflect.TypeOf([]int{}):
		return "an array of integers"
	case reflect.TypeOf(0), reflect.TypeOf((*int64)(nil)):
		return "an integer"
	case reflect.TypeOf(Duration{}):
		return `a duration string such as "60s"`
	case reflect.TypeOf(Size{}):
		return `a size such as "8MiB"`
	case reflect.TypeOf([]FileRule{}):
		return "[[rule]] tables"
	case reflect.TypeOf([]FileMCP{}):
		return "[[mcp]] tables"
	case reflect.TypeOf([]FileMCPRule{}):
		return "[[mcp.rule]] tables"
	case reflect.TypeOf(map[string]string{}):
		return "a table of strings"
	case reflect.TypeOf(map[string][]string{}):
		return "a table of arrays of strings"
	}
	if t.Kind() == reflect.Struct {
		return "a table"
	}
	return t.String()
}

// knownKeys names the keys allowed where path was found, for the fix of an unknown-key error.
func knownKeys(path []string) string {
	t := reflect.TypeOf(File{})
	for _, p := range path[:len(path)-1] {
		for t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct {
			t = t.Elem() // an array of tables: its keys are those of each table
		}
		if t.Kind() == reflect.Map {
			t = t.Elem()
			continue // a name of your choice ([container.NAME])
		}
		if t.Kind() != reflect.Struct {
			break
		}
		f, ok := fieldByTag(t, p)
		if !ok {
			break
		}
		t = f.Type
		if t.Kind() == reflect.Map && t.Elem().Kind() != reflect.Struct {
			return "this table takes names of your choice"
		}
	}
	tables := t.Kind() == reflect.Slice // an array of tables: [[rule]], [[secret]], [[inject]]
	if tables {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeOf(Duration{}) || t == reflect.TypeOf(Size{}) {
		return "check the spelling against docs/policy.md"
	}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		if tag := t.Field(i).Tag.Get("toml"); tag != "" {
			names = append(names, tag)
		}
	}
	where := "the top level"
	if len(path) > 1 {
		where = "[" + strings.Join(path[:len(path)-1], ".") + "]"
		if tables {
			where = "[" + where + "]"
		}
	}
	return fmt.Sprintf("the keys of %s are %s (see docs/policy.md)", where, strings.Join(names, ", "))
}

func fieldByTag(t reflect.Type, tag string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		if t.Field(i).Tag.Get("toml") == tag {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}
