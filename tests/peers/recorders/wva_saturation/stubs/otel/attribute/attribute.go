// Package attribute: the span attribute constructors analyzer.go calls.
package attribute

type KeyValue struct{}

func String(string, string) KeyValue   { return KeyValue{} }
func Int(string, int) KeyValue         { return KeyValue{} }
func Float64(string, float64) KeyValue { return KeyValue{} }
func Bool(string, bool) KeyValue       { return KeyValue{} }
