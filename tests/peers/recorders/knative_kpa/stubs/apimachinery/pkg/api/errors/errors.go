package errors

func IsNotFound(error) bool { return false }
