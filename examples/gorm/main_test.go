package main

import (
	"bytes"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/examples/internal/clustertest"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// open opens GORM through OpenWithHooks with a recorder on an empty
// database, migrates it, and waits until reads go to the replicas.
func open(t *testing.T, cfg ...*gorm.Config) (*gorm.DB, *pgrouted.Connector, *clustertest.Recorder) {
	t.Helper()
	migrate := clustertest.Clean(t, "users", "posts")
	rec := &clustertest.Recorder{}
	c := &gorm.Config{}
	if len(cfg) > 0 {
		c = cfg[0]
	}
	c.Logger = logger.Discard
	db, conn, err := OpenWithHooks(clustertest.DSN(), rec.Record, c)
	if err != nil {
		t.Fatal(err)
	}
	closeOnCleanup(t, db)
	clustertest.WaitCatalog(t, conn)
	if migrate {
		if err := Migrate(clustertest.Ctx(t), db); err != nil {
			t.Fatal(err)
		}
		clustertest.Migrated()
	}
	clustertest.WaitReplicaRoute(t, conn)
	return db, conn, rec
}

func closeOnCleanup(t *testing.T, db *gorm.DB) {
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
}

// where names the node that really ran a statement, through GORM's raw
// SQL API, and whether it is a standby.
func where(t *testing.T, db *gorm.DB) (node string, inRecovery bool) {
	t.Helper()
	var r struct {
		Port       int
		InRecovery bool
	}
	if err := db.Raw("SELECT inet_server_port() AS port, pg_is_in_recovery() AS in_recovery").Scan(&r).Error; err != nil {
		t.Fatal(err)
	}
	return clustertest.NodeByPort(t, r.Port), r.InRecovery
}

func TestWorkload(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, rec := open(t)
	clustertest.Workload(t, Store{DB: db}, conn, rec)
}

// TestWorkloadPrepareStmt: the same workload with GORM's prepared
// statement mode: prepared reads still go to replicas.
func TestWorkloadPrepareStmt(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, rec := open(t, &gorm.Config{PrepareStmt: true})
	clustertest.Workload(t, Store{DB: db}, conn, rec)
}

func TestProgram(t *testing.T) {
	defer clustertest.Guard(t)
	clustertest.Reset(t)
	var out bytes.Buffer
	if err := run(clustertest.Ctx(t), clustertest.DSN(), &out); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	for _, want := range []string{
		"read  on node0 (forced): SELECT count(*) FROM information_schema.tables",
		`write on node0 (write): CREATE TABLE "users"`,
		"tx    on node0 (write): BEGIN",
		`write on node0 (in-tx): INSERT INTO "users"`,
		`write on node0 (in-tx): INSERT INTO "posts"`,
		"tx    on node0 (in-tx): COMMIT",
		`read  on node0 (forced): SELECT * FROM "users" WHERE "users"."id" = $1`,
		"read back ada with 1 post(s)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestOpenByDriverName: GORM opened with DriverName "pgrouted" and a DSN
// alone: the servers themselves say that reads ran on a replica and
// writes on the primary, and reads see the writes.
func TestOpenByDriverName(t *testing.T) {
	defer clustertest.Guard(t)
	clustertest.Reset(t)
	ctx := clustertest.Ctx(t)
	db, err := Open(clustertest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	db = db.Session(&gorm.Session{Logger: logger.Discard})
	closeOnCleanup(t, db)
	if err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	u := User{Name: "by driver name"}
	if err := db.WithContext(ctx).Clauses(clause.Returning{Columns: []clause.Column{{Name: "id"}}}).Create(&u).Error; err != nil {
		t.Fatal(err)
	}
	var got User
	if err := db.WithContext(ctx).First(&got, u.ID).Error; err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, got.Name == u.Name, "read after create by driver name: %q", got.Name)
	// Once the probes see the replicas hold the write, reads go there.
	clustertest.UntilReplica(t, `reads through DriverName "pgrouted"`, func() (string, bool) { return where(t, db.WithContext(ctx)) })
	var port int
	if err := db.WithContext(ctx).Raw(`UPDATE users SET balance = balance + 1 WHERE id = ? RETURNING inet_server_port()`, u.ID).Scan(&port).Error; err != nil {
		t.Fatal(err)
	}
	if node := clustertest.NodeByPort(t, port); node != "node0" {
		t.Errorf("an UPDATE through GORM ran on %s", node)
	}
	if node, _ := where(t, db.WithContext(pgrouted.WithRoute(ctx, pgrouted.Primary))); node != "node0" {
		t.Errorf("a read forced to the primary ran on %s", node)
	}
}

// TestOpenConnector: GORM opened on a Connector whose handle the caller
// keeps: the Connector's Stats count what GORM ran, per host, and its
// Topology names the three hosts; reads see the writes.
func TestOpenConnector(t *testing.T) {
	defer clustertest.Guard(t)
	clustertest.Reset(t)
	ctx := clustertest.Ctx(t)
	db, conn, err := OpenConnector(clustertest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	db = db.Session(&gorm.Session{Logger: logger.Discard})
	closeOnCleanup(t, db)
	if err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	u := User{Name: "through the connector"}
	if err := db.WithContext(ctx).Create(&u).Error; err != nil {
		t.Fatal(err)
	}
	var got User
	if err := db.WithContext(ctx).First(&got, u.ID).Error; err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, got.Name == u.Name, "read after create through the Connector: %q", got.Name)
	if top := conn.Topology(); len(top.Hosts) != 3 || top.Primary != "node0" {
		t.Errorf("Topology: primary %q, %d hosts", top.Primary, len(top.Hosts))
	}
	st := conn.Stats()
	if st.Statements["node0"][pgrouted.OpTx] == 0 {
		t.Errorf("Stats counted no transaction on the primary: %+v", st.Statements)
	}
	var reads uint64
	for _, byOp := range st.Statements {
		reads += byOp[pgrouted.OpRead]
	}
	if reads == 0 {
		t.Errorf("Stats counted no read: %+v", st.Statements)
	}
}

// TestMigrations: AutoMigrate, forced to the primary, runs there
// entirely, its catalog reads included, and is idempotent.
func TestMigrations(t *testing.T) {
	defer clustertest.Guard(t)
	clustertest.Reset(t)
	ctx := clustertest.Ctx(t)
	rec := &clustertest.Recorder{}
	db, conn, err := OpenWithHooks(clustertest.DSN(), rec.Record, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	closeOnCleanup(t, db)
	clustertest.WaitReplicaRoute(t, conn)
	if err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	events := rec.Events()
	clustertest.OnPrimary(t, "AutoMigrate", events)
	if len(clustertest.Matching(events, "CREATE TABLE")) != 2 || len(clustertest.Matching(events, "information_schema")) == 0 {
		t.Errorf("AutoMigrate: %+v", events)
	}
	clustertest.WaitReplicaRoute(t, conn)
	mark := rec.Mark()
	if err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	again := rec.Since(mark)
	for _, e := range again {
		if e.Op != pgrouted.OpRead {
			t.Errorf("a second AutoMigrate changed something: %q", e.Query)
		}
	}
	clustertest.OnPrimary(t, "catalog reads of a second AutoMigrate", again)
	if !db.Migrator().HasTable(&Post{}) || !db.Migrator().HasIndex(&User{}, "Email") {
		t.Error("tables or indexes missing after AutoMigrate")
	}
}

// TestCRUD: create, read after create, update, delete.
func TestCRUD(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	mark := rec.Mark()
	u := User{Name: "ada"}
	if err := db.WithContext(ctx).Create(&u).Error; err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "Create", rec.Since(mark))
	var got User
	if err := db.WithContext(ctx).First(&got, u.ID).Error; err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, got.Name == "ada", "read after create: %+v", got)

	clustertest.WaitReplicaRoute(t, conn)
	mark = rec.Mark()
	var all []User
	if err := db.WithContext(ctx).Where("name = ?", "ada").Find(&all).Error; err != nil || len(all) != 1 {
		t.Fatalf("find: %v %v", all, err)
	}
	clustertest.OnReplicas(t, "Find once the replicas hold the write", rec.Since(mark))

	mark = rec.Mark()
	if err := db.WithContext(ctx).Model(&u).Updates(map[string]any{"name": "ada lovelace", "balance": 10}).Error; err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "Updates", rec.Since(mark))
	got = User{}
	db.WithContext(ctx).First(&got, u.ID)
	clustertest.Fresh(t, got.Name == "ada lovelace" && got.Balance == 10, "read after update: %+v", got)

	mark = rec.Mark()
	if err := db.WithContext(ctx).Delete(&u).Error; err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "Delete", rec.Since(mark))
	err := db.WithContext(ctx).First(&User{}, u.ID).Error
	clustertest.Fresh(t, errors.Is(err, gorm.ErrRecordNotFound), "read after delete: %v", err)
}

// TestDefaultTransaction: GORM wraps each write in a transaction unless
// SkipDefaultTransaction; either way it runs on the primary.
func TestDefaultTransaction(t *testing.T) {
	defer clustertest.Guard(t)
	db, _, rec := open(t)
	ctx := clustertest.Ctx(t)
	mark := rec.Mark()
	if err := db.WithContext(ctx).Create(&User{Name: "wrapped"}).Error; err != nil {
		t.Fatal(err)
	}
	events := rec.Since(mark)
	clustertest.OnPrimary(t, "Create in GORM's default transaction", events)
	if len(events) != 3 || events[0].Query != "BEGIN" || events[2].Query != "COMMIT" {
		t.Errorf("default transaction: %d events, want BEGIN, INSERT, COMMIT: %+v", len(events), events)
	}

	skip := db.Session(&gorm.Session{SkipDefaultTransaction: true})
	mark = rec.Mark()
	u := User{Name: "unwrapped"}
	if err := skip.WithContext(ctx).Create(&u).Error; err != nil {
		t.Fatal(err)
	}
	if err := skip.WithContext(ctx).Model(&u).Update("balance", 5).Error; err != nil {
		t.Fatal(err)
	}
	if err := skip.WithContext(ctx).Delete(&User{}, "name = ?", "wrapped").Error; err != nil {
		t.Fatal(err)
	}
	events = rec.Since(mark)
	clustertest.OnPrimary(t, "SkipDefaultTransaction writes", events)
	for _, e := range events {
		if e.Op != pgrouted.OpWrite {
			t.Errorf("SkipDefaultTransaction: %q is %s, want a write in autocommit", e.Query, e.Op)
		}
	}
	var got User
	if err := db.WithContext(ctx).First(&got, u.ID).Error; err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, got.Balance == 5, "read after autocommit update: %+v", got)
}

// TestTransactions: db.Transaction, nested transactions (savepoints),
// manual SavePoint/RollbackTo, all on the primary; a read-only transaction
// on a replica.
func TestTransactions(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	mark := rec.Mark()
	var owner User
	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		owner = User{Name: "owner"}
		if err := tx.Create(&owner).Error; err != nil {
			return err
		}
		if node, rec := where(t, tx); rec || node != "node0" {
			t.Errorf("a read in a transaction ran on %s", node)
		}
		// A nested transaction is a savepoint; its error rolls back to it.
		_ = tx.Transaction(func(tx2 *gorm.DB) error {
			tx2.Create(&Post{UserID: owner.ID, Title: "rolled back"})
			return errors.New("undo the inner transaction")
		})
		if err := tx.Transaction(func(tx2 *gorm.DB) error {
			return tx2.Create(&Post{UserID: owner.ID, Title: "kept"}).Error
		}); err != nil {
			return err
		}
		// The same by hand.
		tx.SavePoint("before_draft")
		tx.Create(&Post{UserID: owner.ID, Title: "draft"})
		tx.RollbackTo("before_draft")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	events := rec.Since(mark)
	clustertest.OnPrimary(t, "transaction with savepoints", events)
	if len(clustertest.Matching(events, "SAVEPOINT")) < 4 || len(clustertest.Matching(events, "ROLLBACK TO SAVEPOINT")) != 2 {
		t.Errorf("savepoints not seen: %+v", events)
	}
	var posts []Post
	if err := db.WithContext(ctx).Where("user_id = ?", owner.ID).Order("id").Find(&posts).Error; err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, len(posts) == 1 && posts[0].Title == "kept", "after commit: %+v, want only the kept post", posts)

	// A read-only transaction runs on a replica that holds the commit.
	clustertest.WaitReplicaRoute(t, conn)
	err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if node, rec := where(t, tx); !rec || !clustertest.IsReplica(node) {
			t.Errorf("a read-only transaction ran on %s", node)
		}
		var n int64
		if err := tx.Model(&Post{}).Where("user_id = ?", owner.ID).Count(&n).Error; err != nil {
			return err
		}
		clustertest.Fresh(t, n == 1, "read-only transaction on a replica: %d posts, want 1", n)
		return nil
	}, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAssociationsAndPagination: Preload and Joins after the replicas
// caught up run there; pages are complete and in order.
func TestAssociationsAndPagination(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	var users []User
	for i := 0; i < 7; i++ {
		users = append(users, User{Name: "u", Posts: []Post{{Title: "a"}, {Title: "b"}}})
	}
	if err := db.WithContext(ctx).Create(&users).Error; err != nil {
		t.Fatal(err)
	}
	clustertest.WaitReplicaRoute(t, conn)
	mark := rec.Mark()
	var loaded []User
	if err := db.WithContext(ctx).Preload("Posts").Order("id").Find(&loaded).Error; err != nil {
		t.Fatal(err)
	}
	ok := len(loaded) == 7
	for _, u := range loaded {
		ok = ok && len(u.Posts) == 2
	}
	clustertest.Fresh(t, ok, "Preload: %d users", len(loaded))
	var withUser []struct {
		Title string
		Name  string
	}
	if err := db.WithContext(ctx).Model(&Post{}).Select("posts.title, users.name").Joins("JOIN users ON users.id = posts.user_id").Scan(&withUser).Error; err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, len(withUser) == 14, "join: %d rows, want 14", len(withUser))
	var ids []int64
	for page := 0; ; page++ {
		var p []User
		if err := db.WithContext(ctx).Order("id").Limit(3).Offset(page * 3).Find(&p).Error; err != nil {
			t.Fatal(err)
		}
		for _, u := range p {
			ids = append(ids, u.ID)
		}
		if len(p) < 3 {
			break
		}
	}
	clustertest.Fresh(t, len(ids) == 7 && ids[0] == users[0].ID && ids[6] == users[6].ID, "pages: %v", ids)
	clustertest.OnReplicas(t, "eager loading and pagination", rec.Since(mark))
}

// TestUpsertReturning: ON CONFLICT ... RETURNING through GORM's clauses
// runs on the primary, and the next read sees it.
func TestUpsertReturning(t *testing.T) {
	defer clustertest.Guard(t)
	db, _, rec := open(t)
	ctx := clustertest.Ctx(t)
	email := "grace@example.com"
	upsert := clause.OnConflict{Columns: []clause.Column{{Name: "email"}}, DoUpdates: clause.AssignmentColumns([]string{"name"})}
	mark := rec.Mark()
	a := User{Name: "grace", Email: &email}
	if err := db.WithContext(ctx).Clauses(upsert).Create(&a).Error; err != nil {
		t.Fatal(err)
	}
	b := User{Name: "grace hopper", Email: &email}
	if err := db.WithContext(ctx).Clauses(upsert).Create(&b).Error; err != nil {
		t.Fatal(err)
	}
	if a.ID == 0 || a.ID != b.ID {
		t.Errorf("upsert returned ids %d and %d", a.ID, b.ID)
	}
	var changed []User
	if err := db.WithContext(ctx).Model(&changed).Clauses(clause.Returning{}).Where("email = ?", email).Update("balance", gorm.Expr("balance + ?", 7)).Error; err != nil {
		t.Fatal(err)
	}
	if len(changed) != 1 || changed[0].Balance != 7 || changed[0].Name != "grace hopper" {
		t.Errorf("UPDATE ... RETURNING: %+v", changed)
	}
	events := rec.Since(mark)
	clustertest.OnPrimary(t, "upserts and UPDATE ... RETURNING", events)
	if len(clustertest.Matching(events, "ON CONFLICT", "RETURNING")) != 2 {
		t.Errorf("no INSERT ... ON CONFLICT ... RETURNING seen: %+v", events)
	}
	var got User
	db.WithContext(ctx).First(&got, a.ID)
	clustertest.Fresh(t, got.Name == "grace hopper" && got.Balance == 7, "read after upsert: %+v", got)
}

// TestLocking: clause.Locking, in a transaction or not, runs on the
// primary.
func TestLocking(t *testing.T) {
	defer clustertest.Guard(t)
	db, _, rec := open(t)
	ctx := clustertest.Ctx(t)
	u := User{Name: "locked", Balance: 100}
	if err := db.WithContext(ctx).Create(&u).Error; err != nil {
		t.Fatal(err)
	}
	mark := rec.Mark()
	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var cur User
		if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).First(&cur, u.ID).Error; err != nil {
			return err
		}
		return tx.Model(&cur).Update("balance", cur.Balance-30).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "FOR UPDATE in a transaction", rec.Since(mark))
	mark = rec.Mark()
	var cur User
	if err := db.WithContext(ctx).Clauses(clause.Locking{Strength: "SHARE", Options: "NOWAIT"}).First(&cur, u.ID).Error; err != nil {
		t.Fatal(err)
	}
	events := rec.Since(mark)
	clustertest.OnPrimary(t, "FOR SHARE outside a transaction", events)
	if len(events) != 1 || events[0].Op != pgrouted.OpLock || !strings.Contains(events[0].Query, "FOR SHARE NOWAIT") {
		t.Errorf("FOR SHARE: %+v", events)
	}
	clustertest.Fresh(t, cur.Balance == 70, "balance after the locked update: %d, want 70", cur.Balance)
}

// TestRawSQL: Raw reads go to replicas, Exec to the primary, and a
// routing comment in raw SQL forces the primary.
func TestRawSQL(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	mark := rec.Mark()
	if err := db.WithContext(ctx).Exec("INSERT INTO users (name, balance) VALUES (?, ?), (?, ?)", "x", 1, "y", 2).Error; err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "Exec", rec.Since(mark))
	var sum int64
	if err := db.WithContext(ctx).Raw("SELECT sum(balance) FROM users").Scan(&sum).Error; err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, sum == 3, "raw read after raw insert: sum %d, want 3", sum)
	clustertest.WaitReplicaRoute(t, conn)
	mark = rec.Mark()
	if node, r := where(t, db.WithContext(ctx)); !r || !clustertest.IsReplica(node) {
		t.Errorf("Raw read ran on %s", node)
	}
	rows, err := db.WithContext(ctx).Raw("SELECT name FROM users ORDER BY name").Rows()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		rows.Scan(&n)
		names = append(names, n)
	}
	rows.Close()
	clustertest.Fresh(t, strings.Join(names, ",") == "x,y", "Rows: %v", names)
	clustertest.OnReplicas(t, "Raw reads", rec.Since(mark))
	var port int
	if err := db.WithContext(ctx).Raw("/* pgrouted:primary */ SELECT inet_server_port()").Scan(&port).Error; err != nil {
		t.Fatal(err)
	}
	if node := clustertest.NodeByPort(t, port); node != "node0" {
		t.Errorf("/* pgrouted:primary */ raw read ran on %s", node)
	}
}

// TestPrepareStmt: GORM's prepared statement mode, as a session: reads on
// replicas, writes and transactions on the primary.
func TestPrepareStmt(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	p := db.Session(&gorm.Session{PrepareStmt: true})
	u := User{Name: "prepared"}
	mark := rec.Mark()
	if err := p.WithContext(ctx).Create(&u).Error; err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "prepared Create", rec.Since(mark))
	var got User
	p.WithContext(ctx).First(&got, u.ID)
	clustertest.Fresh(t, got.Name == "prepared", "prepared read after prepared create: %+v", got)
	clustertest.WaitReplicaRoute(t, conn)
	mark = rec.Mark()
	for i := 0; i < 5; i++ {
		got = User{}
		if err := p.WithContext(ctx).First(&got, u.ID).Error; err != nil {
			t.Fatal(err)
		}
		clustertest.Fresh(t, got.Name == "prepared", "prepared read: %+v", got)
	}
	clustertest.OnReplicas(t, "prepared reads", rec.Since(mark))
	mark = rec.Mark()
	err := p.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return tx.Model(&u).Update("name", "prepared again").Error
	})
	if err != nil {
		t.Fatal(err)
	}
	clustertest.OnPrimary(t, "prepared update in a transaction", rec.Since(mark))
	got = User{}
	p.WithContext(ctx).First(&got, u.ID)
	clustertest.Fresh(t, got.Name == "prepared again", "prepared read after update: %+v", got)
}

// TestForcedRouting: the route travels in the context through
// db.WithContext.
func TestForcedRouting(t *testing.T) {
	defer clustertest.Guard(t)
	db, conn, rec := open(t)
	ctx := clustertest.Ctx(t)
	u := User{Name: "forced"}
	if err := db.WithContext(ctx).Create(&u).Error; err != nil {
		t.Fatal(err)
	}
	mark := rec.Mark()
	got, err := ReadFromPrimary(ctx, db, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Fresh(t, got.Name == "forced", "forced primary read: %+v", got)
	primary := db.WithContext(pgrouted.WithRoute(ctx, pgrouted.Primary))
	if node, r := where(t, primary); r || node != "node0" {
		t.Errorf("WithRoute(Primary) raw read ran on %s", node)
	}
	events := rec.Since(mark)
	clustertest.OnPrimary(t, "WithRoute(Primary)", events)
	for _, e := range events {
		if e.Reason != pgrouted.ReasonForced {
			t.Errorf("%q: reason %s, want forced", e.Query, e.Reason)
		}
	}
	replica := db.WithContext(pgrouted.WithRoute(ctx, pgrouted.Replica))
	clustertest.WaitReplicaRoute(t, conn)
	if node, r := where(t, replica); !r || !clustertest.IsReplica(node) {
		t.Errorf("WithRoute(Replica) raw read ran on %s", node)
	}
	err = replica.Create(&User{Name: "never"}).Error
	if !errors.Is(err, pgrouted.ErrWriteOnReplica) {
		t.Errorf("Create forced to a replica: %v, want ErrWriteOnReplica", err)
	}
}
