-- name: CreateUser :one
INSERT INTO users (name) VALUES ($1) RETURNING id;

-- name: AddPost :exec
INSERT INTO posts (user_id, title) VALUES ($1, $2);

-- name: RenameUser :exec
UPDATE users SET name = $2 WHERE id = $1;

-- name: DeleteUser :exec
DELETE FROM users WHERE id = $1;

-- name: GetUser :one
SELECT id, name, email, balance FROM users WHERE id = $1;

-- name: PostTitles :many
SELECT title FROM posts WHERE user_id = $1 ORDER BY id;

-- name: PageUsers :many
SELECT id FROM users ORDER BY id LIMIT $1 OFFSET $2;

-- name: CountUsers :one
SELECT count(*) FROM users;

-- name: AddBalance :exec
UPDATE users SET balance = balance + $2 WHERE id = $1;

-- name: CopyUsers :copyfrom
INSERT INTO users (name, balance) VALUES ($1, $2);

-- name: AddPosts :batchexec
INSERT INTO posts (user_id, title) VALUES ($1, $2);

-- name: WhereAmI :one
SELECT inet_server_port()::int AS port, pg_is_in_recovery() AS in_recovery;
