-- +goose Up
INSERT INTO goose_log (v) VALUES (2);

-- +goose Down
DELETE FROM goose_log WHERE v = 2;
