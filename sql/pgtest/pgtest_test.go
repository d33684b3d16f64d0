package pgtest

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func TestDatabaseIsMigratedAndPrivate(t *testing.T) {
	t.Parallel()
	a, b := DB(t), DB(t)
	if _, err := a.Exec(`INSERT INTO projects (name) VALUES ('p')`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(`SELECT count(*) FROM projects`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("databases are shared: second one sees %d projects", n)
	}
}
