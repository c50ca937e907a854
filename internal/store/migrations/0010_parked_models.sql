-- Models the fleet parked after their engine failed to start too many times
-- in a row (package fleet), so that a restart of modelserve does not start
-- them again, and fail again, as many more times. fingerprint is what of the
-- catalog entry was parked: an entry served again or changed since is not
-- this one, and starts afresh.
CREATE TABLE parked_models (
	model       TEXT PRIMARY KEY,
	fingerprint TEXT NOT NULL,
	reason      TEXT NOT NULL,
	failures    INTEGER NOT NULL,
	parked_at   TEXT NOT NULL
);
