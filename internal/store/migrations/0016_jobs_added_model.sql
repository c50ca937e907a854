-- Whether a job put its model's entry in the catalog, the name not being
-- there before it (package jobs). A job cancelled or failed after its
-- catalog step takes out the entry it added, and only that one: a serve of
-- a model already in the catalog leaves the entry it found.
ALTER TABLE jobs ADD COLUMN added_model INTEGER NOT NULL DEFAULT 0;
