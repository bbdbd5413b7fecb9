package server

import "github.com/fairqueue/fairqueue/dataplane/admission"

// refundIdentity gives back the identity tokens an admitted request took
// when no backend can take it, so none is lost to a request the backends
// refused (SPEC section 2). A failed refund is logged: the tokens refill on
// their own.
func (s *Server) refundIdentity(rt *runtime, ar *admission.Request) {
	if err := rt.admit.Refund(*ar); err != nil {
		s.log.V(1).Info("Refunding identity tokens failed", "error", err.Error(),
			"apiKey", shortHash(ar.Identity.APIKey), "user", shortHash(ar.Identity.User))
	}
}
