// Package docs holds no code: its tests check the repository's own
// documentation. README.md must render as CommonMark/GFM the way it reads in
// an editor (every heading a heading, every table a table), and its
// "Adopt it in your service" recipe must work verbatim in a new module.
//
// The tests live here rather than beside some other package because the
// README belongs to no package, and because rendering it needs a Markdown
// parser (goldmark) that no shipped code should import.
package docs
