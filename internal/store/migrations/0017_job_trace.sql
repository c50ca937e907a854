-- The trace of a job's latest run and that run's root span (package jobs):
-- the API and the console link the job to its trace, and a resumed run's
-- trace links to the one before.
ALTER TABLE jobs ADD COLUMN trace_id TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN trace_span TEXT NOT NULL DEFAULT '';
