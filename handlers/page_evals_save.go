package handlers

import (
	"net/http"

	"modelserve/internal/operr"
	"modelserve/views"
)

// evalsSave replaces a model's suite with the editor's text, then back to
// the page. A suite refused comes back in the editor with the sentence
// why (200, so htmx swaps it in, and the text typed is not lost), and
// nothing is changed.
func (s *Server) evalsSave(w http.ResponseWriter, r *http.Request, v visit) {
	name := r.PathValue("name")
	text := r.PostFormValue("suite")
	st, err := s.deps.Evals.SetSuite(r.Context(), name, []byte(text), v.user)
	if e, ok := operr.As(err); ok && e.Kind == operr.Invalid {
		p, _, lerr := s.loadEvals(r.Context(), v, name)
		if lerr != nil {
			s.pageError(w, r, v, lerr)
			return
		}
		p.Form.Suite, p.Form.Error = text, e.Msg
		s.render(w, r, http.StatusOK, views.EvalsPageView(p))
		return
	}
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	s.deps.Log.Info("eval suite set from the console", "model", name, "cases", len(st.Suite.Cases), "digest", st.Digest, "user", v.user)
	http.Redirect(w, r, evalsURL(name)+"?saved=1", http.StatusSeeOther)
}
