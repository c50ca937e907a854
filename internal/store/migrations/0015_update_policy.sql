-- What the watcher does with an update it notices for a model
-- (internal/updates): manual waits for an operator to try it; auto starts
-- the update's trial at once (jobs.Server.Update), judged and promoted or
-- rolled back without anyone's hand.
ALTER TABLE update_checks ADD COLUMN policy TEXT NOT NULL DEFAULT 'manual' CHECK (policy IN ('manual', 'auto'));
