// Package text holds the small wording helpers the CLI's and the library's messages share.
package text

import (
	"fmt"
	"strings"
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
