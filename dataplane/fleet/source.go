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

package fleet

import (
	"github.com/redis/go-redis/v9"

	"github.com/fairqueue/fairqueue/dataplane/limiter/redisstore"
)

// SwitchSource returns a RedisSource following sw: the client of the Redis
// store in force, with the policy's hash tag in the prefix so the reports
// share the slot of the buckets, or nil while the memory store is in force.
func SwitchSource(sw *redisstore.Switch) RedisSource {
	return func() (redis.UniversalClient, string) {
		st := sw.Redis()
		if st == nil {
			return nil, ""
		}
		return st.Client(), "fq:" + st.HashTag() + ":fleet:"
	}
}
