// Package text holds the small wording helpers the CLI's and the library's messages share.
package text

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agnivade/levenshtein"
)

// Plural gives "1 object" or "n objects" (a noun ending in a consonant and y: "2 policies";
// in s, x or ch: "2 boxes").
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	switch {
	case len(noun) >= 2 && strings.HasSuffix(noun, "y") && !strings.ContainsAny(noun[len(noun)-2:len(noun)-1], "aeiou"):
		return fmt.Sprintf("%d %sies", n, noun[:len(noun)-1])
	case strings.HasSuffix(noun, "s") || strings.HasSuffix(noun, "x") || strings.HasSuffix(noun, "ch"):
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// Similar returns the candidates that look like a mistyping of name, in the order given: the
// same name in another case, or within a Levenshtein distance of 1 (names of up to 4 runes) or
// 2 (longer names), counted in runes. name itself, and the empty name, are never similar.
func Similar(name string, candidates []string) []string {
	n := utf8.RuneCountInString(name)
	if n == 0 {
		return nil
	}
	limit := 1
	if n > 4 {
		limit = 2
	}
	var out []string
	for _, c := range candidates {
		if c == name || c == "" {
			continue
		}
		if strings.EqualFold(c, name) || levenshtein.ComputeDistance(c, name) <= limit {
			out = append(out, c)
		}
	}
	return out
}

// Join is strings.Join of xs' String forms.
func Join[T fmt.Stringer](xs []T, sep string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = x.String()
	}
	return strings.Join(s, sep)
}
