package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// builtinCommand matches `declare` where a shell reads it as the command: at the start of a
// line or inline code span, or after a pipe, separator, $ prompt, sudo or env. Bash runs its
// builtin declare there, never the CLI, whose binary is rabbitdelay (cmd/rabbitdelay).
var builtinCommand = regexp.MustCompile(`(^|[;&|(]|\$ |\bsudo |\benv )\s*declare(\s|$)`)

// lineBreak is a line break inside an inline code span, with the indentation around it.
var lineBreak = regexp.MustCompile(`[ \t]*\n[ \t]*`)

// shellCode returns the file's code, each with the line it starts on: every line of a fenced
// block, and every inline code span outside them, also one that a line break splits (a span
// never crosses a blank line, as in Markdown); a line break inside a span reads as a space.
func shellCode(text string) (code []string, lines []int) {
	in := false
	var para []string // the lines of the paragraph being read, outside fences
	start := 0        // line number of para[0]
	flush := func() {
		joined := strings.Join(para, "\n")
		for _, ix := range inlineCode.FindAllStringIndex(joined, -1) {
			span := lineBreak.ReplaceAllString(strings.Trim(joined[ix[0]:ix[1]], "`"), " ")
			code, lines = append(code, span), append(lines, start+strings.Count(joined[:ix[0]], "\n"))
		}
		para = para[:0]
	}
	for i, line := range strings.Split(text, "\n") {
		switch {
		case fence.MatchString(line):
			flush()
			in = !in
		case in:
			code, lines = append(code, line), append(lines, i+1)
		case strings.TrimSpace(line) == "":
			flush()
		default:
			if len(para) == 0 {
				start = i + 1
			}
			para = append(para, line)
		}
	}
	flush()
	return code, lines
}

// TestNoDeclareCommand fails when a page shows `declare <command>` as something to type: in
// bash that runs the builtin declare, not the CLI, which is installed as rabbitdelay.
func TestNoDeclareCommand(t *testing.T) {
	for _, page := range pages(t) {
		raw, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatalf("read %s: %v", page, err)
		}
		code, lines := shellCode(string(raw))
		for i, c := range code {
			if builtinCommand.MatchString(c) {
				t.Errorf("%s:%d: %q runs bash's builtin declare; the CLI is rabbitdelay (go install ./cmd/rabbitdelay)",
					page, lines[i], strings.TrimSpace(c))
			}
		}
	}
}

// TestBuiltinCommandPattern holds the pattern to the forms pages use.
func TestBuiltinCommandPattern(t *testing.T) {
	for c, want := range map[string]bool{
		"declare apply":                       true,
		"  declare status --json":             true,
		"$ declare plan":                      true,
		"eval \"$(x)\" && declare apply":      true,
		"sudo declare teardown":               true,
		"declare":                             true,
		"rabbitdelay apply":                   false,
		"go build ./cmd/declare":              false,
		"rabbitdelay apply   # declare it":    false,
		"exchange.declare":                    false,
		"s.Declare(ctx, schedule.Schedule{})": false,
	} {
		if got := builtinCommand.MatchString(c); got != want {
			t.Errorf("builtinCommand.MatchString(%q) = %v, want %v", c, got, want)
		}
	}
	code, lines := shellCode("a `declare apply` b\n```sh\nrabbitdelay plan\n```\nrun `declare\nrebalance` now\n\n`x\n\ny`\n")
	if len(code) != 3 || code[0] != "declare apply" || lines[0] != 1 || lines[1] != 3 || !strings.HasPrefix(code[1], "rabbitdelay") ||
		code[2] != "declare rebalance" || lines[2] != 5 {
		t.Fatalf("shellCode = %q at lines %v", code, lines)
	}
	if !builtinCommand.MatchString(code[2]) {
		t.Errorf("a span split by a line break, %q, is not caught", code[2])
	}
}
