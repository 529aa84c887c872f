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

// shellCode returns the file's code, each with its line number: every line of a fenced block
// and every inline code span outside them.
func shellCode(text string) (code []string, lines []int) {
	in := false
	for i, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			in = !in
			continue
		}
		if in {
			code, lines = append(code, line), append(lines, i+1)
			continue
		}
		for _, span := range inlineCode.FindAllString(line, -1) {
			code, lines = append(code, strings.Trim(span, "`")), append(lines, i+1)
		}
	}
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
	code, lines := shellCode("a `declare apply` b\n```sh\nrabbitdelay plan\n```\n")
	if len(code) != 2 || code[0] != "declare apply" || lines[0] != 1 || lines[1] != 3 || !strings.HasPrefix(code[1], "rabbitdelay") {
		t.Errorf("shellCode = %q at lines %v", code, lines)
	}
}
