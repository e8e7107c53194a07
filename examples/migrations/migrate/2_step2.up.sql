INSERT INTO migrate_log (v) VALUES (2);
