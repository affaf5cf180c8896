// Package telemetry: a tracer whose spans record nothing.
package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
)

type Span struct{}

func (Span) End()                                {}
func (Span) SetAttributes(...attribute.KeyValue) {}

type tracer struct{}

func (tracer) Start(ctx context.Context, _ string) (context.Context, Span) { return ctx, Span{} }

var Tracer tracer
