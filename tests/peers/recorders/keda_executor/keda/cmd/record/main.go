// Reads cases (JSON on stdin), writes what KEDA's scale executor does for each.
package main

import (
	"encoding/json"
	"os"

	"github.com/kedacore/keda/v2/pkg/scaling/executor"
)

func main() {
	var cases []executor.Case
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(executor.Record(cases)); err != nil {
		panic(err)
	}
}
