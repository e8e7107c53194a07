package clustertest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/pgrouted/pgrouted"
)

// Store is the small application every example implements with its ORM's
// ordinary API: users with posts.
type Store interface {
	// CreateUser inserts a user and returns its id.
	CreateUser(ctx context.Context, name string) (int64, error)
	// AddPost inserts a post of user id.
	AddPost(ctx context.Context, userID int64, title string) error
	// Rename updates a user's name.
	Rename(ctx context.Context, id int64, name string) error
	// DeleteUser deletes a user and its posts.
	DeleteUser(ctx context.Context, id int64) error
	// User reads a user with its posts' titles in id order (eager
	// loading); found is false when there is none.
	User(ctx context.Context, id int64) (name string, posts []string, found bool, err error)
	// Page returns the ids of the users in id order, limit from offset.
	Page(ctx context.Context, offset, limit int) ([]int64, error)
	// Count returns the number of users.
	Count(ctx context.Context) (int64, error)
}

type user struct {
	name  string
	posts []string
}

// Workload runs a web-like workload through s, with replication delayed
// (see ReplicationLatency), and checks every read against what the test
// itself wrote: zero stale reads.
//
// Each round has a write phase, where every write is read back at once
// (read-your-writes: pgrouted must send that read to the primary, or to a
// replica that has already replayed the write), then a read-heavy phase of
// listing, counting and loading users with their posts, as pages of a site
// do between writes. Before the read phase the round waits, by asking the
// driver with Explain, until reads would go to a replica again: the
// replicas have replayed this connector's writes. That wait is the honest
// cause of the replica share: reads long after a write go to replicas;
// reads right after one go to the primary.
//
// It fails the test when replicas served half of its reads or fewer, and
// logs the share.
func Workload(t *testing.T, s Store, conn *pgrouted.Connector, rec *Recorder) {
	t.Helper()
	ctx := Ctx(t)
	const rounds = 6
	model := map[int64]*user{}
	mark := rec.Mark()
	var readBacks, behind int

	check := func(id int64, when string) {
		t.Helper()
		name, posts, found, err := s.User(ctx, id)
		if err != nil {
			t.Fatalf("%s: read user %d: %v", when, id, err)
		}
		want, exists := model[id]
		if !exists {
			Fresh(t, !found, "%s: user %d was deleted, still read as %q", when, id, name)
			return
		}
		Fresh(t, found && name == want.name && slices.Equal(posts, want.posts),
			"%s: user %d read as (%q, %q, found %v), want (%q, %q)", when, id, name, posts, found, want.name, want.posts)
	}
	// readBack reads id at once after a write, noting whether a replica
	// could have served it without missing the write.
	readBack := func(id int64, what string) {
		t.Helper()
		readBacks++
		if ReplicasBehind(ctx, t) {
			behind++
		}
		check(id, "right after "+what)
	}

	var next int
	for round := 0; round < rounds; round++ {
		// Write phase.
		for i := 0; i < 3; i++ {
			next++
			name := fmt.Sprintf("user-%03d", next)
			id, err := s.CreateUser(ctx, name)
			if err != nil {
				t.Fatalf("create %s: %v", name, err)
			}
			model[id] = &user{name: name}
			readBack(id, "create")
		}
		ids := slices.Sorted(maps.Keys(model))
		target := ids[len(ids)-1]
		title := fmt.Sprintf("post %d", round)
		if err := s.AddPost(ctx, target, title); err != nil {
			t.Fatalf("add post: %v", err)
		}
		model[target].posts = append(model[target].posts, title)
		readBack(target, "adding a post")
		renamed := ids[round%len(ids)]
		model[renamed].name += "-renamed"
		if err := s.Rename(ctx, renamed, model[renamed].name); err != nil {
			t.Fatalf("rename: %v", err)
		}
		readBack(renamed, "a rename")
		if round%2 == 1 {
			gone := ids[len(ids)/2]
			if err := s.DeleteUser(ctx, gone); err != nil {
				t.Fatalf("delete: %v", err)
			}
			delete(model, gone)
			readBack(gone, "a delete")
		}

		// Read phase: a while after the writes, as most page views are.
		WaitReplicaRoute(t, conn)
		ids = slices.Sorted(maps.Keys(model))
		n, err := s.Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		Fresh(t, n == int64(len(model)), "count %d, want %d", n, len(model))
		var listed []int64
		for offset := 0; ; offset += 4 {
			page, err := s.Page(ctx, offset, 4)
			if err != nil {
				t.Fatal(err)
			}
			listed = append(listed, page...)
			if len(page) < 4 {
				break
			}
		}
		Fresh(t, slices.Equal(listed, ids), "pages list %v, want %v", listed, ids)
		for _, id := range ids {
			check(id, "in the read phase")
		}
	}

	onReplica, reads := Share(rec.Since(mark))
	share := float64(onReplica) / float64(max(reads, 1))
	t.Logf("workload: %d rounds, %d users left; %d reads, %d (%.0f%%) served by replicas; %d reads right after a write, %d of them while no replica had replayed it yet",
		rounds, len(model), reads, onReplica, 100*share, readBacks, behind)
	if share <= MinReplicaShare {
		t.Errorf("replicas served %.0f%% of the reads, want more than %.0f%%", 100*share, 100*MinReplicaShare)
	}
	if behind == 0 {
		t.Errorf("no read-back found the replicas behind: the injected replication latency had no effect, the test proves nothing")
	}
}
