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

package server

import (
	"github.com/fairqueue/fairqueue/dataplane/admission"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// FleetGate paces tenants on model limits that several replicas share in
// Redis, so that the fleet's grants follow weighted max-min fair shares
// (dataplane/fleet.Pacer implements it; its Run loop is started by the
// caller). The Server installs it on its admission controller and hands it
// every loaded config's limits and weights.
type FleetGate interface {
	admission.Gate
	// SetLimits gives the limits whose model buckets the fleet shares.
	SetLimits(cfg limiter.Config)
	// SetWeights gives the tenant weights, the same as the fair queue's.
	SetWeights(w fairqueue.Weights)
}

// applyFleet hands a loaded config to the fleet gate, if there is one, and
// installs it on a.
func (s *Server) applyFleet(a *admission.Controller, limits limiter.Config, weights fairqueue.Weights) {
	if s.fleet == nil {
		return
	}
	s.fleet.SetLimits(limits)
	s.fleet.SetWeights(weights)
	a.SetGate(s.fleet)
}
