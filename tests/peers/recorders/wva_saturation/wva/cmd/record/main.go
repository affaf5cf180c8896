// Reads cases (JSON on stdin), writes WVA's analysis and target for each.
package main

import (
	"encoding/json"
	"os"

	"github.com/llm-d/llm-d-workload-variant-autoscaler/internal/saturation"
)

func main() {
	var cases []saturation.Case
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(saturation.Record(cases)); err != nil {
		panic(err)
	}
}
