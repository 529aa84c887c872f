// Package docs holds the test that keeps the repository's documentation navigable: every
// relative link in README.md, CONTRIBUTING.md and docs/*.md names a file or directory that
// exists, and every #anchor names a heading of the page it points to. It needs no broker.
package docs
