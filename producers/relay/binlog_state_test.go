package relay

import "testing"

// TestStreamStateResumesInsideTransaction: a stream resuming inside a
// transaction (Rows relayed before) reports that position, never the
// transaction's start alone, before the transaction's events arrive, at
// its GTID event, and while its relayed rows are skipped; rows relayed
// after them count on top; its commit moves past it.
func TestStreamStateResumesInsideTransaction(t *testing.T) {
	pos := BinlogPosition{Flavor: FlavorMariaDB, GTIDSet: "0-1-41", File: "b.1", Offset: 900, Rows: 3}
	st, err := newStreamState(FlavorMariaDB, pos)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.current(); got != pos {
		t.Fatalf("before any event: %+v, want %+v", got, pos)
	}
	st.begin() // the transaction's GTID event
	if got := st.current(); got.Rows != 3 {
		t.Fatalf("at its GTID event: %+v, want 3 rows done", got)
	}
	for range 3 { // its first three rows: skipped
		st.rows++
		st.skip--
		if got := st.current(); got.Rows != 3 {
			t.Fatalf("while skipping: %+v, want 3 rows done", got)
		}
	}
	st.rows++ // a new row
	if got := st.current(); got.Rows != 4 || got.GTIDSet != "0-1-41" {
		t.Fatalf("after a new row: %+v", got)
	}
	if err := st.commit(); err != nil {
		t.Fatal(err)
	}
	if got := st.current(); got.Rows != 0 || st.skip != 0 {
		t.Fatalf("after the commit: %+v (skip %d)", got, st.skip)
	}
	fresh, err := newStreamState(FlavorMariaDB, BinlogPosition{Flavor: FlavorMariaDB, GTIDSet: "0-1-41"})
	if err != nil || fresh.inTxn || fresh.current().Rows != 0 {
		t.Fatalf("a position between transactions starts inside one: %+v, %v", fresh, err)
	}
	if _, err := newStreamState(FlavorMariaDB, BinlogPosition{GTIDSet: "not a gtid"}); err == nil {
		t.Fatal("a malformed stored GTID set was accepted")
	}
}
