package metric

type MeterProvider interface{}
