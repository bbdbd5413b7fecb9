package server

import (
	"sync"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/admission"
	"github.com/fairqueue/fairqueue/dataplane/capacity"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/proxy"
)

// capacityState is capacity mode on the server (SPEC 6b): one Tracker for
// the server's life, given each config's backends by Apply, so a request in
// flight across a reload keeps its slot; and the goroutine that turns a slot
// coming free into a grant of the fair queue. It is built by the first config
// with spec.capacity and closed with the server's last runtime.
type capacityState struct {
	tracker *capacity.Tracker
	wake    chan struct{} // one pending wake-up is enough
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// capacityBackends returns the tracker's backends of a rendered config.
func capacityBackends(c *config.Capacity) []capacity.Backend {
	if c == nil {
		return nil
	}
	return c.Backends
}

// capacityFor returns the server's capacity state, building it on the first
// config that turns capacity mode on; nil while no config has. Callers hold
// loadMu.
func (s *Server) capacityFor(cfg *config.Config) *capacityState {
	if s.capacity != nil || cfg.Capacity == nil {
		return s.capacity
	}
	cs := &capacityState{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	cs.tracker = capacity.New(capacity.Options{
		OnRoom:   cs.onRoom(),
		Shared:   s.capShared,
		Observer: s.capObserver(),
		Logger:   s.log.WithName("capacity"),
		Clock:    s.clock,
	})
	go cs.run(s)
	s.capacity = cs
	s.capLive.Store(cs)
	return cs
}

// onRoom wakes the runner without blocking (capacity.Options.OnRoom). The
// tracker itself times the slots that waits and refusals are told about
// (capacity.Tracker.NextRelease).
func (cs *capacityState) onRoom() func(string) {
	return func(string) {
		select {
		case cs.wake <- struct{}{}:
		default:
		}
	}
}

// run wakes the fair queue's capacity waiters each time a slot frees, until
// close.
func (cs *capacityState) run(s *Server) {
	defer close(cs.done)
	for {
		select {
		case <-cs.wake:
			if a := s.admit; a != nil {
				a.WakeCapacity()
			}
		case <-cs.stop:
			return
		}
	}
}

// close stops the pollers and the runner; later calls do nothing.
func (cs *capacityState) close() {
	cs.once.Do(func() {
		close(cs.stop)
		<-cs.done
		cs.tracker.Close()
	})
}

// capacityRequest fills the capacity part of an admission request from the
// runtime in force: every backend of the pool is a candidate, from the
// pool's next weighted round-robin turn.
func (rt *runtime) capacityRequest(ar *admission.Request) {
	if !rt.capacityOn {
		return
	}
	ar.Capacity = admission.Capacity{Tracker: rt.capacity.tracker, Start: rt.pool.NextIndex()}
}

// applyCapacity puts cfg's capacity in force: the tracker takes the new
// backends (a backend that stays keeps its count), and rt uses it; without
// spec.capacity the tracker, if any, keeps no backends and rt does not use
// it. Called once nothing else can fail; backends were validated by
// newRuntime, so Apply fails only on a closed tracker, which is logged.
func (s *Server) applyCapacity(rt *runtime, cfg *config.Config) {
	cs := s.capacityFor(cfg)
	if cs == nil {
		return
	}
	if err := cs.tracker.ApplyPool(capacityBackends(cfg.Capacity), int(cfg.FairQueuing.Bounds.MaxTenants), rt.backendNames); err != nil {
		s.log.Error(err, "Applying backend capacity failed; capacity mode is off until the next config")
		return
	}
	// With capacity mode off the state is kept (and closed with the
	// server's last runtime) for a later config that turns it on again.
	rt.capacity, rt.capacityOn = cs, cfg.Capacity != nil
}

// capObserver returns the observer of the tracker's pollers.
func (s *Server) capObserver() capacity.Observer { return s.capMetrics }

// capacityStats is what the capacity metrics read at each scrape: nothing
// before a config turned capacity mode on.
func (s *Server) capacityStats() []capacity.BackendStats {
	if cs := s.capLive.Load(); cs != nil {
		return cs.tracker.Stats()
	}
	return nil
}

// pick returns the backend for an admitted request: in capacity mode the one
// its ticket holds a slot on, which must also pass the per-backend limit;
// otherwise the pool's weighted round-robin choice. nil means none can take
// it now, retryable after the duration returned.
func (rt *runtime) pick(tk *admission.Ticket) (*proxy.Backend, time.Duration) {
	name := tk.Backend()
	if name == "" {
		return rt.pool.Pick(rt.take)
	}
	b := rt.pool.ByName(name)
	if b == nil {
		// A reload removed the backend while the request waited: retry when
		// the backends in force are expected to free a slot.
		if rt.capacity == nil {
			return nil, capacity.DefaultReleaseSpacing
		}
		next, _ := rt.capacity.tracker.NextRelease(rt.backendNames)
		return nil, next
	}
	if rt.take != nil {
		if ok, retry := rt.take(name); !ok {
			return nil, retry
		}
	}
	return b, 0
}
