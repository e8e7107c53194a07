DELETE FROM migrate_log WHERE v = 2;
