package handlers

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"modelserve/jobs"
)

// modelUpdate serves a model's update beside it as its canary, from the
// update's page, and goes on to the job trying it.
func (s *Server) modelUpdate(w http.ResponseWriter, r *http.Request, v visit) {
	id, err := strconv.ParseInt(strings.TrimSpace(r.PostFormValue("update_id")), 10, 64)
	if err != nil || id <= 0 {
		s.pageError(w, r, v, badRequest("the form names no update: open the update's page and try it from there"))
		return
	}
	name := r.PathValue("name")
	j, err := s.deps.Jobs.Update(r.Context(), jobs.UpdateRequest{Model: name, UpdateID: id, By: v.user})
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	s.deps.Log.Info("update tried from the console", "model", name, "update", id, "job", j.ID, "user", v.user)
	http.Redirect(w, r, "/jobs/"+j.ID, http.StatusSeeOther)
}

// modelPromote promotes the version of a model on trial, by hand.
func (s *Server) modelPromote(w http.ResponseWriter, r *http.Request, v visit) {
	s.decideTrial(w, r, v, s.deps.Jobs.Promote)
}

// modelRollBack rolls the version of a model on trial back, by hand.
func (s *Server) modelRollBack(w http.ResponseWriter, r *http.Request, v visit) {
	s.decideTrial(w, r, v, s.deps.Jobs.RollBack)
}

func (s *Server) decideTrial(w http.ResponseWriter, r *http.Request, v visit, decide func(context.Context, string, string) (jobs.Job, error)) {
	name := r.PathValue("name")
	j, err := decide(r.Context(), name, v.user)
	if err != nil {
		s.pageError(w, r, v, err)
		return
	}
	s.deps.Log.Info("an update's trial decided from the console", "model", name, "job", j.ID, "user", v.user)
	http.Redirect(w, r, "/jobs/"+j.ID, http.StatusSeeOther)
}
