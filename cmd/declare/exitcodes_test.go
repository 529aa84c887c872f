package declare

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/delaykit/rabbitdelay/internal/admin"
	"github.com/delaykit/rabbitdelay/internal/amqpconn"
	"github.com/delaykit/rabbitdelay/internal/delayspec"
)

// cliExitCodes reads the exit-code constants of the CLI (const exitXxx = N in this package's
// non-test files) from the source, so that a constant added later is compared too.
func cliExitCodes(t *testing.T) map[int]string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if !strings.HasPrefix(n.Name, "exit") || i >= len(vs.Values) {
							continue
						}
						lit, ok := vs.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.INT {
							t.Fatalf("exit-code constant %s is not an integer literal", n.Name)
						}
						code, _ := strconv.Atoi(lit.Value)
						out[code] = n.Name
					}
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no exit-code constants (exit...) found in cmd/declare")
	}
	return out
}

// docExitCodes reads the exit-code table of docs/operations.md (its "## Exit codes" section,
// rows "| N | meaning |").
func docExitCodes(t *testing.T) map[int]string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Exit codes\n")
	if !ok {
		t.Fatal("docs/operations.md has no ## Exit codes section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile(`(?m)^\|\s*(\d+)\s*\|\s*(.*?)\s*\|\s*$`)
	out := map[int]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		code, _ := strconv.Atoi(m[1])
		if _, dup := out[code]; dup {
			t.Errorf("docs/operations.md lists exit code %d twice", code)
		}
		out[code] = m[2]
	}
	if len(out) == 0 {
		t.Fatal("docs/operations.md's Exit codes section has no table rows")
	}
	return out
}

// TestExitCodesDocumented: the exit-code table of docs/operations.md and the CLI's exit codes
// agree in both directions: every constant is a row and every row a constant; each kind of
// failure lands on the code whose row names it (exitCode, run); and `rabbitdelay --help` lists the
// same codes.
func TestExitCodesDocumented(t *testing.T) {
	cli, doc := cliExitCodes(t), docExitCodes(t)
	for code, name := range cli {
		if _, ok := doc[code]; !ok {
			t.Errorf("the CLI has exit code %d (%s); docs/operations.md's table does not list it", code, name)
		}
	}
	for code := range doc {
		if _, ok := cli[code]; !ok {
			t.Errorf("docs/operations.md lists exit code %d; the CLI has no such code (constants: %v)", code, cli)
		}
	}
	// Each kind of failure: the code the CLI returns for it, and words its row must contain.
	for _, c := range []struct {
		err   error
		words string
	}{
		{usageError{errors.New("bad flag")}, "flag"},
		{fmt.Errorf("x: %w", delayspec.ErrInvalidSpec), "specification"},
		{fmt.Errorf("x: %w", amqpconn.ErrConfig), "invalid value"},
		{fmt.Errorf("x: %w", admin.ErrTargetMissing), "missing target exchange"},
		{fmt.Errorf("x: %w", admin.ErrConflict), "conflict"},
		{fmt.Errorf("x: %w", admin.ErrIncomplete), "not declared, incomplete"},
		{fmt.Errorf("x: %w", admin.ErrUnhealthy), "unhealthy"},
		{fmt.Errorf("x: %w", admin.ErrPolicy), "policy in effect"},
		{fmt.Errorf("x: %w", admin.ErrPluginUnavailable), "plugin required"},
		{errors.New("dial tcp: connection refused"), "unreachable"},
	} {
		code := exitCode(c.err)
		if !strings.Contains(doc[code], c.words) {
			t.Errorf("%v exits %d, whose row in docs/operations.md does not say %q: %q", c.err, code, c.words, doc[code])
		}
	}
	// rabbitdelay --help's exit codes are the same set.
	var help strings.Builder
	printUsage(&help)
	_, codes, ok := strings.Cut(help.String(), "\nExit codes (docs/operations.md):\n")
	if !ok {
		t.Fatal("rabbitdelay --help has no Exit codes section")
	}
	var listed []int
	for _, m := range regexp.MustCompile(`(?m)^  (\d+)  `).FindAllStringSubmatch(codes, -1) {
		n, _ := strconv.Atoi(m[1])
		listed = append(listed, n)
	}
	var want []int
	for code := range cli {
		want = append(want, code)
	}
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Errorf("rabbitdelay --help lists exit codes %v, the CLI has %v", listed, want)
	}
	if code := run(t.Context(), []string{"no-such-command"}, &strings.Builder{}, &strings.Builder{}); !strings.Contains(doc[code], "unknown command") {
		t.Errorf("an unknown command exits %d, whose row does not say so: %q", code, doc[code])
	}
}

// TestApplyHelpNamesPolicies: `apply --help` names every policy apply sets (topology's
// Plan.Policies), and says how many.
func TestApplyHelpNamesPolicies(t *testing.T) {
	spec := delayspec.Spec{Prefix: "PREFIX", Targets: delayspec.Targets{{Name: "orders", Type: "topic"}}}
	p, err := admin.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb strings.Builder
	if code := run(t.Context(), []string{"apply", "--help"}, &out, &errb); code != exitOK {
		t.Fatalf("apply --help: exit %d\n%s", code, errb.String())
	}
	help := strings.Join(strings.Fields(out.String()), " ")
	for _, pol := range p.Policies {
		if name := strings.Replace(pol.Name, "PREFIX", "<prefix>", 1); !strings.Contains(help, name) {
			t.Errorf("apply --help does not name the policy %s, which apply sets:\n%s", name, out.String())
		}
	}
	words := map[int]string{1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}
	if !strings.Contains(help, words[len(p.Policies)]+" policies") {
		t.Errorf("apply --help does not say apply sets %s policies:\n%s", words[len(p.Policies)], out.String())
	}
}
