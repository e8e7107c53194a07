-- The example's tables: users with posts, as in the other examples.
CREATE TABLE IF NOT EXISTS users (
	id bigserial PRIMARY KEY,
	name text NOT NULL,
	email text UNIQUE,
	balance bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS posts (
	id bigserial PRIMARY KEY,
	user_id bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	title text NOT NULL
);
