package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// root is the repository root, from this package's directory.
const root = "../.."

// pages returns the Markdown files whose links are checked, relative to root.
func pages(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CONTRIBUTING.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md found: is the test run from internal/docs?")
	}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	inlineCode = regexp.MustCompile("`[^`]*`")
	link       = regexp.MustCompile(`\]\(([^()\s]+)\)`)
	heading    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	slugDrop   = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// prose returns the file's lines outside fenced code blocks, inline code removed.
func prose(text string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			in = !in
			out = append(out, "")
			continue
		}
		if in {
			out = append(out, "")
			continue
		}
		out = append(out, inlineCode.ReplaceAllString(line, ""))
	}
	return out
}

// slug is GitHub's anchor for a heading: lower case, punctuation but hyphens and underscores
// dropped, spaces turned into hyphens.
func slug(h string) string {
	h = strings.ToLower(strings.ReplaceAll(h, "`", ""))
	h = slugDrop.ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// anchors returns the anchors of a Markdown file's headings, duplicates numbered as GitHub does.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	in := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			in = !in
			continue
		}
		m := heading.FindStringSubmatch(line)
		if in || m == nil {
			continue
		}
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func TestLinksResolve(t *testing.T) {
	checked := 0
	for _, page := range pages(t) {
		raw, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatalf("read %s: %v", page, err)
		}
		for i, line := range prose(string(raw)) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				where := page + ":" + strconv.Itoa(i+1)
				file, frag, _ := strings.Cut(target, "#")
				rel := page
				if file != "" {
					rel = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), file)))
				}
				if strings.HasPrefix(rel, "../") {
					t.Errorf("%s: link %q leaves the repository", where, target)
					continue
				}
				body, err := os.ReadFile(filepath.Join(root, rel))
				if err != nil {
					if st, serr := os.Stat(filepath.Join(root, rel)); serr == nil && st.IsDir() {
						if frag != "" {
							t.Errorf("%s: link %q: an anchor on a directory", where, target)
						}
						continue
					}
					t.Errorf("%s: link %q: %s does not exist", where, target, rel)
					continue
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(rel, ".md") {
					t.Errorf("%s: link %q: an anchor on a file that is not Markdown", where, target)
					continue
				}
				if !anchors(string(body))[frag] {
					t.Errorf("%s: link %q: %s has no heading with the anchor #%s", where, target, rel, frag)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: the link pattern no longer matches the pages")
	}
}

// TestSlug holds the anchor rule to GitHub's on headings of the kinds the pages use.
func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"Many publishes in flight (`PublishDeferred`)":            "many-publishes-in-flight-publishdeferred",
		"What `rabbitdelay status` checks":                        "what-rabbitdelay-status-checks",
		"Plugin missing, or RabbitMQ 4.3":                         "plugin-missing-or-rabbitmq-43",
		"A delayed message keeps the publisher's permissions":     "a-delayed-message-keeps-the-publishers-permissions",
		"RabbitMQ 4.0.5, and PendingScale with `PublishDeferred`": "rabbitmq-405-and-pendingscale-with-publishdeferred",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
	a := anchors("# A\n## B\n```\n# not a heading\n```\n## B\n")
	for _, want := range []string{"a", "b", "b-1"} {
		if !a[want] {
			t.Errorf("anchors: no %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("anchors: a line in a code block counted as a heading")
	}
}
