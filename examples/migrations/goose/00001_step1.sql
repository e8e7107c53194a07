-- +goose Up
CREATE TABLE goose_log (v int NOT NULL, at timestamptz NOT NULL DEFAULT now());
INSERT INTO goose_log (v) VALUES (1);

-- +goose Down
DROP TABLE goose_log;
