CREATE TABLE migrate_log (v int NOT NULL, at timestamptz NOT NULL DEFAULT now());
INSERT INTO migrate_log (v) VALUES (1);
