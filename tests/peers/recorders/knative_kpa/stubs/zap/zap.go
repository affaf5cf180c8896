// Package zap: the logger calls Knative's Scale makes, all discarding (no output to record).
package zap

import "go.uber.org/zap/zapcore"

type Field struct{}

func Error(error) Field { return Field{} }

type Logger struct{}

func (*Logger) Core() zapcore.Core     { return zapcore.Core{} }
func (*Logger) Debug(string, ...Field) {}

type SugaredLogger struct{}

func NewNop() *SugaredLogger                         { return &SugaredLogger{} }
func (*SugaredLogger) Desugar() *Logger              { return &Logger{} }
func (*SugaredLogger) Debug(...interface{})          {}
func (*SugaredLogger) Info(...interface{})           {}
func (*SugaredLogger) Infof(string, ...interface{})  {}
func (*SugaredLogger) Errorw(string, ...interface{}) {}
func (*SugaredLogger) Debugw(string, ...interface{}) {}
