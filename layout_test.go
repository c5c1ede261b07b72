// Package roomflow holds no code: its test keeps the package layout of
// docs/architecture.md.
package roomflow

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/hyapp/roomflow"

// mayImport is the import rule of docs/architecture.md: the top-level
// directories whose packages a package under each one may import, besides
// its own. cmd/ and benchmarks/ wire everything together, tools/ holds
// what the one-shot commands do across the roles, and chaos/ runs the
// whole binary under faults: they may import anything. Test files are not
// checked. deploy/ is a module of its own (its tests' libraries stay out of
// this go.mod), so `go list ./...` does not reach it.
var mayImport = map[string][]string{
	"schemas":    {},
	"internal":   {"schemas"},
	"domain":     {"internal", "schemas"},
	"producers":  {"domain", "internal", "schemas"},
	"processors": {"domain", "internal", "schemas"},
	"sinks":      {"domain", "internal", "schemas"},
	"services":   {"domain", "internal", "schemas"},
}

var wiring = []string{"cmd", "benchmarks", "tools", "chaos"}

// forbidden reports why package from may not import package to (paths
// relative to the module), or "" if it may.
func forbidden(from, to string) string {
	f, _, _ := strings.Cut(from, "/")
	d, _, _ := strings.Cut(to, "/")
	if f == d || slices.Contains(wiring, f) {
		return ""
	}
	allowed, known := mayImport[f]
	switch {
	case !known:
		return f + "/ is not in docs/architecture.md's package map"
	case !slices.Contains(allowed, d):
		return f + "/ may not import " + d + "/"
	}
	return ""
}

func TestForbidden(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		ok       bool
	}{
		{"services/luckydraw", "domain/lucky/rulestore", true},
		{"processors/room", "domain/lucky", true},
		{"processors/room", "processors/streams", true},
		{"sinks/mysql/luckystats", "internal/mysqlx", true},
		{"cmd/roomflow", "services/luckydraw", true},
		{"benchmarks/lucky", "sinks/mysql", true},
		{"tools/verify", "services/luckydraw", true},
		{"services/luckydraw", "processors/room", false},
		{"services/statsapi", "sinks/mysql", false},
		{"processors/room", "sinks/mysql", false},
		{"domain/lucky", "processors/room/roomtest", false},
		{"internal/config", "domain/lucky", false},
		{"schemas/envelope", "internal/obs", false},
		{"elsewhere/x", "internal/obs", false},
	} {
		if got := forbidden(tc.from, tc.to); (got == "") != tc.ok {
			t.Errorf("forbidden(%s, %s) = %q, want allowed=%v", tc.from, tc.to, got, tc.ok)
		}
	}
}

// TestLayout fails on a non-test file of the module that imports a
// package docs/architecture.md does not let it import.
func TestLayout(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for line := range strings.Lines(string(out)) {
		pkgs := strings.Fields(line)
		from, ok := strings.CutPrefix(pkgs[0], module+"/")
		if !ok {
			continue // the module root: this test alone
		}
		checked++
		for _, imp := range pkgs[1:] {
			to, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			if why := forbidden(from, to); why != "" {
				t.Errorf("%s imports %s: %s", from, to, why)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("go list found %d packages:\n%s", checked, out)
	}
}

// Size limits of issue 33 (docs/architecture.md): a non-test,
// non-generated Go file outside benchmarks/ has at most maxFileLines
// lines, and each of its functions at most maxFuncLines, from the func
// line to the closing brace.
const (
	maxFileLines = 700
	maxFuncLines = 100
)

// TestSizeLimits names every file and function over the limits (issue 33
// set them; they stand for every later change).
func TestSizeLimits(t *testing.T) {
	over, checked := oversized(t, ".")
	if checked < 100 {
		t.Fatalf("checked %d files: the walk no longer finds the module's code", checked)
	}
	for _, o := range over {
		t.Errorf("%s is %d lines, over the limit of %d: cut it into named parts", o.name, o.lines, o.limit)
	}
}

// offender is a file (its path) or a function (path and name, such as
// "sinks/mysql/store.go (*Store).Apply") over its limit.
type offender struct {
	name         string
	lines, limit int
}

// oversized walks the Go files under root that the limits cover and
// returns those over maxFileLines and the functions over maxFuncLines,
// with the number of files checked.
func oversized(t *testing.T, root string) (over []offender, checked int) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || path == filepath.Join(root, "benchmarks")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || strings.HasSuffix(name, ".pb.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		checked++
		rel := filepath.ToSlash(path)
		if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
			over = append(over, offender{rel, n, maxFileLines})
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
				over = append(over, offender{rel + " " + funcName(fn), n, maxFuncLines})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return over, checked
}

// funcName is fn's name as Go documentation writes it: "Apply",
// "Scenario.Generate", "(*Store).Apply" (type parameters left out).
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	star := ""
	if s, ok := typ.(*ast.StarExpr); ok {
		star, typ = "*", s.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	recv := fmt.Sprint(typ)
	if star != "" {
		return "(*" + recv + ")." + fn.Name.Name
	}
	return recv + "." + fn.Name.Name
}

// TestOversizedCountsWhatTheLimitsCover: a function's lines run from its
// func line to its closing brace; test files, generated files and
// benchmarks/ are not counted.
func TestOversizedCountsWhatTheLimitsCover(t *testing.T) {
	root := t.TempDir()
	body := func(lines int) string { // a function of exactly lines lines
		return "func f() {\n" + strings.Repeat("\t_ = 0\n", lines-2) + "}\n"
	}
	write := func(path, src string) { t.Helper(); writeFixture(t, root, path, src) }
	write("a/at_limit.go", "package a\n\n"+body(maxFuncLines))
	write("a/over.go", "package a\n\ntype T struct{}\n\n"+strings.Replace(body(maxFuncLines+1), "func f()", "func (*T) f()", 1))
	write("a/over_test.go", "package a\n\n"+body(maxFuncLines+1))
	write("a/gen.go", "// Code generated by protoc-gen-go. DO NOT EDIT.\n\npackage a\n\n"+body(maxFuncLines+1))
	write("a/x.pb.go", "package a\n\n"+body(maxFuncLines+1))
	write("benchmarks/b/b.go", "package b\n\n"+body(maxFuncLines+1))
	write("c/long.go", "package c\n"+strings.Repeat("\n", maxFileLines))
	over, checked := oversized(t, root)
	want := []offender{{"a/over.go (*T).f", maxFuncLines + 1, maxFuncLines}, {"c/long.go", maxFileLines + 1, maxFileLines}}
	for i := range want {
		want[i].name = filepath.ToSlash(filepath.Join(root, want[i].name))
	}
	if checked != 3 || !slices.Equal(over, want) {
		t.Fatalf("checked %d files, over %v; want 3 and %v", checked, over, want)
	}
}

// outsideCitation matches what a Go line may not say since issue 33: a
// citation of the product documents by their three-digit number (their
// rules are docs/requirements.md items now: MIC-10, D-IM-1) and a link to
// the shared design outside the repository (the contracts are
// docs/design.md). \b keeps random seeds ("chaos seed 856094729") apart.
var outsideCitation = regexp.MustCompile(`(?i)\bseed [0-9]{3}\b|\.\./shared|shared/design\.md`)

// TestStandsAlone names file:line of every Go line that cites a document
// outside the repository: tests, generated code, --help texts and
// benchmarks included, testdata excepted. Released migrations are SQL and
// not read.
func TestStandsAlone(t *testing.T) {
	found, checked := outsideCitations(t, ".")
	if checked < 100 {
		t.Fatalf("checked %d files: the walk no longer finds the module's code", checked)
	}
	for _, f := range found {
		t.Errorf("cites a document outside the repository (cite docs/requirements.md or docs/design.md instead): %s", f)
	}
}

// outsideCitations walks the files under root that citesChecked names
// (hidden directories and testdata left out) and returns "path:line: text" for each line that
// outsideCitation matches, with the number of files read.
// citesChecked reports whether the file at path is one whose text must
// not cite outside documents: Go, the embedded help texts, protobuf,
// docs, deploy manifests and the Makefile. Released migrations are left
// out: they never change, and migrate checks their text.
func citesChecked(path string) bool {
	switch filepath.Ext(path) {
	case ".go", ".txt", ".proto", ".md", ".yaml", ".yml":
		return true
	}
	return filepath.Base(path) == "Makefile"
}

func outsideCitations(t *testing.T, root string) (found []string, checked int) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !citesChecked(path) {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		n := 0
		for line := range strings.Lines(string(src)) {
			n++
			if outsideCitation.MatchString(line) {
				found = append(found, fmt.Sprintf("%s:%d: %s", filepath.ToSlash(path), n, strings.TrimSpace(line)))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found, checked
}

// TestOutsideCitationsFindsWhatItShould: numbered product documents and
// links out are found in every kind of Go file; random seeds, other text
// and testdata are not.
func TestOutsideCitationsFindsWhatItShould(t *testing.T) {
	root := t.TempDir()
	write := func(path, src string) { t.Helper(); writeFixture(t, root, path, src) }
	// The citations are split in two so that this file does not match.
	write("a/a.go", "package a\n\n// Seed 0"+"00's rule.\nconst x = 1\n")
	write("a/a_test.go", "package a\n\n// found by chaos seed 856094729 and t.Logf(\"seed %d\")\n")
	write("a/x.pb.go", "package a\n\n// see ../sha"+"red/design.md\n")
	write("cmd/c/c.go", "package c\n\nconst help = `the seed 0"+"03 draw`\n")
	write("a/testdata/t.go", "package a // seed 0"+"01\n")
	write("a/doc.go", "package a // MIC-10; shared design notes\n")
	found, checked := outsideCitations(t, root)
	want := []string{"a/a.go:3: // Seed 0" + "00's rule.", "a/x.pb.go:3: // see ../sha" + "red/design.md", "cmd/c/c.go:3: const help = `the seed 0" + "03 draw`"}
	for i := range want {
		want[i] = filepath.ToSlash(root) + "/" + want[i]
	}
	if checked != 5 || !slices.Equal(found, want) {
		t.Fatalf("checked %d files, found %q; want 5 and %q", checked, found, want)
	}
}

// writeFixture writes src to root/path, making its directories.
func writeFixture(t *testing.T, root, path, src string) {
	t.Helper()
	path = filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}
