// Package logging: the verbosity levels analyzer.go logs at (the logger discards everything).
package logging

const (
	VERBOSE = 1
	DEBUG   = 2
)
