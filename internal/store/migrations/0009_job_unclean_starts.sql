-- How many processes in a row began running a job and died without
-- stopping it cleanly (package jobs). A job whose header or request kills
-- the process would otherwise be resumed, and kill it again, at every
-- start; past two such starts it is failed instead of resumed.
ALTER TABLE jobs ADD COLUMN unclean_starts INTEGER NOT NULL DEFAULT 0;
