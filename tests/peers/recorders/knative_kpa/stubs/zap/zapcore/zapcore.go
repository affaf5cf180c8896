package zapcore

type Level int8

const DebugLevel Level = -1

// Core reports every level disabled, so Scale skips its debug formatting.
type Core struct{}

func (Core) Enabled(Level) bool { return false }
