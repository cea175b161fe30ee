// Package report turns one benchmark run (direct and each proxy, measured
// on the same machine in the same run) into a text table, JSON and an SVG
// bar chart of ratios to direct, and checks the figures against Chaperone's
// performance targets.
//
// Guarantees: the writers are pure functions of the Run (no clock, no
// files); a figure a proxy lacks prints as "n/a" with its reason in the
// JSON, never as zero.
//
// It imports only the standard library; no Chaperone package imports it.
package report
