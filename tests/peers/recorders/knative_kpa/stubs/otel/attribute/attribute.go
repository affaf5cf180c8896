package attribute

type Set struct{}
