// Package v1: the Scale subresource, reduced to its replicas.
package v1

type ScaleSpec struct{ Replicas int32 }

type Scale struct{ Spec ScaleSpec }
