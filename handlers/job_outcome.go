package handlers

import (
	"modelserve/jobs"
	"modelserve/views"
)

// jobOutcome is how a job ended, in a word or two for the jobs list, with
// the sentence it failed with (why, "" for none); the zero State while it
// runs. The job page says the same at length (views.JobEnd), from the same
// facts: onDemand, promoted, refused.
func jobOutcome(j jobs.Job) (outcome views.State, why string) {
	switch j.State {
	case jobs.Done:
		switch {
		case promoted(j) && j.Kind == jobs.KindRestore:
			return views.State{Word: "served again", Key: "promoted"}, ""
		case promoted(j):
			return views.State{Word: "promoted", Key: "promoted"}, ""
		case onDemand(j):
			return views.State{Word: "on demand", Key: "done"}, ""
		}
		return views.State{Word: "served", Key: "done"}, ""
	case jobs.Cancelled:
		return views.StateOf("cancelled"), j.Error
	case jobs.Failed:
		step := j.EndStep()
		if _, ok := j.RolledBack(); ok {
			// Judged, not broken: its model keeps what it ran.
			return views.State{Word: "rolled back", Key: "rolled-back"}, j.Error
		}
		switch {
		case j.Refused():
			return views.State{Word: "refused", Key: "failed"}, j.Error
		case step != "":
			return views.State{Word: "failed at " + step, Key: "failed"}, j.Error
		}
		return views.StateOf("failed"), j.Error
	}
	return views.State{}, ""
}

// onDemand is a serve done without starting a replica: its model was added
// to load when first asked for.
func onDemand(j jobs.Job) bool {
	st, ok := j.Step(jobs.StepPlacement)
	return ok && j.State == jobs.Done && st.State == jobs.Skipped && j.Request.Replicas == 0
}

// promoted is an update's or a restore's job that ended done: the version
// it tried is the model now (a roll-back ends it failed).
func promoted(j jobs.Job) bool {
	return (j.Kind == jobs.KindUpdate || j.Kind == jobs.KindRestore) && j.State == jobs.Done
}
