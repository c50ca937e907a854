package handlers

import (
	"net/http"
	"net/url"
	"strconv"
)

// modelCheck asks the registry now whether a model's branch has new
// weights, from the catalog or an update's page: on to the update's page
// when there is one, else back to the catalog, which says what the check
// found. A check that failed says why (and is the model's last check).
func (s *Server) modelCheck(w http.ResponseWriter, r *http.Request, v visit) {
	name := r.PathValue("name")
	res, err := s.deps.Updates.Check(r.Context(), name)
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	s.deps.Log.Info("model checked for new weights from the console", "model", name, "result", res.Result, "user", v.user)
	if res.Update != nil {
		http.Redirect(w, r, "/updates/"+strconv.FormatInt(res.Update.ID, 10), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/catalog?checked="+url.QueryEscape(name), http.StatusSeeOther)
}
