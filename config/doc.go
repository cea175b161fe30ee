// Package config owns Chaperone's configuration: one typed Config, defaults
// that work with no file at all, Validate, and Load, which layers a YAML file,
// CHAPERONE_* environment variables and command-line flags with viper.
//
// Guarantees:
//   - Precedence is flags > environment > file > defaults, per key; a flag
//     counts only when the user set it.
//   - A nil error from Load or Validate means every key was checked: paths
//     that must exist exist, listen is a loopback address, and so on.
//     Validate reports every problem at once, each as a *FieldError naming
//     its key.
//   - Unknown keys in a file are errors, never silently ignored, inside
//     credentials entries too.
//   - A Config holds no secret: credentials name the environment variable
//     or file holding each value, which the caller reads. It may be shown
//     as it is (YAML).
//   - Load reads the environment only through LoadOptions (viper would read
//     the process environment itself, so the CHAPERONE_* values are handed
//     to viper as a configuration layer instead of through AutomaticEnv) and
//     uses its own viper instance, never viper's global one.
//
// This package imports viper, pflag, the YAML library and the standard
// library; it must not import any package that does I/O on the data path,
// nor rewrite/inject, whose rules for identity presets, credentials and
// hosts it repeats (agree_test.go checks that the two agree).
package config
