// Package layers holds the test that enforces DESIGN.md's import rules: event
// at the bottom, pure logic above it, I/O above that, kernel code beside I/O,
// and only cmd wiring them together. It has no code of its own.
package layers
