DROP TABLE migrate_log;
