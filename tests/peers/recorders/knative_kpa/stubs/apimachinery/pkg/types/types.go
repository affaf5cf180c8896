package types

type NamespacedName struct{ Namespace, Name string }
