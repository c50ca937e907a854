-- People who sign in to the console (package auth). Only a bcrypt hash of
-- each password is kept: the database alone lets nobody in. Names compare
-- without case, so "Admin" and "admin" cannot be two people.
CREATE TABLE users (
	name          TEXT PRIMARY KEY COLLATE NOCASE,
	password_hash TEXT NOT NULL,
	created_at    TEXT NOT NULL
);
