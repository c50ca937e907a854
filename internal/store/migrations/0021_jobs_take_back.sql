-- What an update's or a restore's in-place trial has changed of its model
-- and not yet kept (package jobs): the model's entry before its replica
-- was replaced, its scaling before one of its replicas gave its room to
-- the version, and the suite's result on the version before, as JSON, or
-- '' when there is nothing to take back. Kept with the job, so a trial
-- resumed after a restart still judges in place and, not kept, puts the
-- model back as it was.
ALTER TABLE jobs ADD COLUMN take_back TEXT NOT NULL DEFAULT '';
