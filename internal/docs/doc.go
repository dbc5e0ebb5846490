// Package docs holds no code: its test checks that the links between README.md and the
// pages under docs/ lead somewhere, so a moved section or a renamed page cannot strand a
// reader.
package docs
