// Package docs holds the tests that keep the repository's documentation navigable and its
// commands typeable: every relative link in README.md, CONTRIBUTING.md and docs/*.md names a
// file or directory that exists, every #anchor names a heading of the page it points to, and no
// code on those pages runs `declare` as a command (bash's builtin; the CLI is rabbitdelay). It
// needs no broker.
package docs
