package policy

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
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
}

// Decode reads a policy file strictly: TOML syntax, types, unknown keys and the version. It does
// not check values; see Validate.
func Decode(name string, data []byte) (*Document, error) {
	src := string(data)
	loc := newLocator(src)
	var f File
	md, err := toml.Decode(src, &f)
	if err != nil {
		return nil, Errors{tomlError(name, err)}
	}
	var errs Errors
	seen := make(map[string]int)
	for _, k := range md.Undecoded() {
		path := []string(k)
		n := seen[k.String()]
		seen[k.String()] = n + 1
		line := loc.plainLine(path, n)
		if line == 0 {
			line = loc.line(path...)
		}
		errs = append(errs, &Error{File: name, Line: line, Key: k.String(),
			Msg: "unknown key; " + knownKeys(path)})
		if len(errs) >= maxErrors {
			break
		}
	}
	if !md.IsDefined("version") {
		errs = append(errs, &Error{File: name, Line: 1, Key: "version",
			Msg: "missing; start the file with version = 1"})
	} else if f.Version != 1 {
		errs = append(errs, &Error{File: name, Line: loc.line("version"), Key: "version",
			Msg: fmt.Sprintf("%d is not supported; this lockhttp reads version = 1", f.Version)})
	}
	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
		return nil, errs
	}
	return &Document{File: f, Name: name, Text: data, loc: loc}, nil
}

var tomlTypeErr = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key "([^"]*)"\): (.*)$`)

// tomlError turns an error of the TOML decoder into an Error with a line, a key and a fix.
func tomlError(name string, err error) *Error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return &Error{File: name, Line: pe.Position.Line, Key: pe.LastKey, Msg: friendlyTOML(pe.Message, pe.LastKey)}
	}
	if m := tomlTypeErr.FindStringSubmatch(err.Error()); m != nil {
		line := 0
		fmt.Sscan(m[1], &line)
		return &Error{File: name, Line: line, Key: m[2], Msg: friendlyTOML(m[3], m[2])}
	}
	return &Error{File: name, Msg: strings.TrimPrefix(err.Error(), "toml: ")}
}

var destType = regexp.MustCompile(`; destination has type .*$`)

// friendlyTOML rewords the decoder's message; for a type mismatch it says what the key takes.
func friendlyTOML(msg, key string) string {
	if !strings.Contains(msg, "incompatible types") {
		return msg
	}
	msg = strings.Replace(msg, "incompatible types: TOML value has type", "wrong type: the value is", 1)
	return destType.ReplaceAllString(msg, "; it must be "+wantType(strings.Split(key, ".")))
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
	case reflect.TypeOf(0):
		return "an integer"
	case reflect.TypeOf(Duration{}):
		return `a duration string such as "60s"`
	case reflect.TypeOf(Size{}):
		return `a size such as "8MiB"`
	case reflect.TypeOf([]FileRule{}):
		return "[[rule]] tables"
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
		if t.Kind() == reflect.Slice {
			t = t.Elem()
			continue // the array-of-tables index
		}
		if t.Kind() != reflect.Struct {
			break
		}
		f, ok := fieldByTag(t, p)
		if !ok {
			break
		}
		t = f.Type
		if t.Kind() == reflect.Map {
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
