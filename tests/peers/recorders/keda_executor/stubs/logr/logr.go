// Package logr: the logger calls the scale executor makes, all discarding.
package logr

type Logger struct{}

func (l Logger) WithValues(...interface{}) Logger  { return l }
func (l Logger) V(int) Logger                      { return l }
func (Logger) Info(string, ...interface{})         {}
func (Logger) Error(error, string, ...interface{}) {}
