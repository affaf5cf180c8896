// Package types: NamespacedName.
package types

type NamespacedName struct{ Namespace, Name string }
