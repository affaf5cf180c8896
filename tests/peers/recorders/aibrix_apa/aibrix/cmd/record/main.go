// Reads cases (JSON on stdin), writes APA's replicas for each.
package main

import (
	"encoding/json"
	"os"

	"github.com/vllm-project/aibrix/pkg/controller/podautoscaler/algorithm"
	scalingctx "github.com/vllm-project/aibrix/pkg/controller/podautoscaler/context"
)

func main() {
	var cases []scalingctx.Case
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(algorithm.Record(cases)); err != nil {
		panic(err)
	}
}
