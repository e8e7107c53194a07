package main

// The generated client, in ./entdb, is committed. Regenerate it after
// changing ./schema with: go generate ./ent (from examples/).
//go:generate go tool ent generate --feature sql/upsert,sql/lock,sql/execquery --target ./entdb ./schema
