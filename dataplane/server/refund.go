package server

import "github.com/fairqueue/fairqueue/dataplane/limiter"

// refundIdentity gives back the identity tokens an admitted request took
// when no backend can take it, so none is lost to a request the backends
// refused (SPEC section 2). A failed refund is logged: the tokens refill on
// their own.
func (s *Server) refundIdentity(rt *runtime, id *requestIdentity) {
	keys := limiter.Keys{APIKey: id.apiKeyHash, User: id.userHash, Team: id.teamHash, Model: id.model}
	if err := rt.lim.RefundIdentity(s.clock.Now(), keys); err != nil {
		s.log.V(1).Info("Refunding identity tokens failed", "error", err.Error(),
			"apiKey", shortHash(id.apiKeyHash), "user", shortHash(id.userHash))
	}
}
