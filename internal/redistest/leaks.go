/*
Copyright 2026 The fairqueue Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package redistest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// leakGrace is how long Run waits for goroutines to end: go-redis retries a
// failed dial every second in a goroutine that exits at its next attempt
// once its client is closed.
const leakGrace = 3 * time.Second

// Run runs the tests of a package that uses Redis clients and returns the
// exit code, 1 when goroutines are still running leakGrace after the tests
// passed. Call it as os.Exit(redistest.Run(m)) from TestMain.
func Run(m *testing.M) int {
	code := m.Run()
	deadline := time.Now().Add(leakGrace)
	for code == 0 {
		err := goleak.Find()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "goroutines left running after the tests:", err)
			code = 1
		}
		time.Sleep(100 * time.Millisecond)
	}
	return code
}
