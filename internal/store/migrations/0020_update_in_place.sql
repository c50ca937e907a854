-- Whether a model's update, or a version of it served again, may replace
-- its replica in place when there is no room beside it (jobs' in-place
-- trial): the model's requests wait while it reloads. On unless the
-- operator turns it off, when such an update is refused as before.
ALTER TABLE update_checks ADD COLUMN in_place INTEGER NOT NULL DEFAULT 1 CHECK (in_place IN (0, 1));
