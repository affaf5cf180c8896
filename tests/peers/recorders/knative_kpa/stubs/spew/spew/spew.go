package spew

import "fmt"

func Sdump(a ...interface{}) string { return fmt.Sprint(a...) }
