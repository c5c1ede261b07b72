package relay

import (
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

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
	st.commit()
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

// TestStreamStateGTIDSetAcrossFailover: the GTID set holds the last GTID of
// each domain, whichever server wrote it, as MariaDB's connect state must
// (a failover to another primary continues domain 0 under its server id),
// and a stored set holding two of one domain is read as its later one.
func TestStreamStateGTIDSetAcrossFailover(t *testing.T) {
	for _, c := range []struct {
		name, stored string
		commits      []gomysql.MariadbGTID
		want         string
	}{
		{"same server", "0-11-30", []gomysql.MariadbGTID{{DomainID: 0, ServerID: 11, SequenceNumber: 31}}, "0-11-31"},
		{"new primary", "0-11-30", []gomysql.MariadbGTID{{DomainID: 0, ServerID: 12, SequenceNumber: 31}}, "0-12-31"},
		{"other domain kept", "0-11-30,1-11-7", []gomysql.MariadbGTID{{DomainID: 0, ServerID: 12, SequenceNumber: 31}}, "0-12-31,1-11-7"},
		{"new domain", "0-11-30", []gomysql.MariadbGTID{{DomainID: 2, ServerID: 12, SequenceNumber: 1}}, "0-11-30,2-12-1"},
		{"two of one domain stored", "0-11-30,0-12-35", nil, "0-12-35"},
		{"empty", "", []gomysql.MariadbGTID{{DomainID: 0, ServerID: 1, SequenceNumber: 1}}, "0-1-1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := newStreamState(FlavorMariaDB, BinlogPosition{Flavor: FlavorMariaDB, GTIDSet: c.stored})
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range c.commits {
				st.begin()
				st.gtid = g
				st.commit()
			}
			if got := st.current().GTIDSet; got != c.want {
				t.Errorf("GTID set %q, want %q", got, c.want)
			}
		})
	}
}

// TestStreamStateMySQLGTIDSet: on MySQL each committed transaction's GTID
// joins the executed set (a new server UUID after a failover adds its own
// interval), an anonymous one (gtid_mode OFF) moves only the offset, and
// a transaction whose end was not recognised ends at the next GTID event.
func TestStreamStateMySQLGTIDSet(t *testing.T) {
	const a, b = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "8a94f357-aab4-11df-86ab-c80aa9429562"
	st, err := newStreamState(FlavorMySQL, BinlogPosition{Flavor: FlavorMySQL, GTIDSet: a + ":1-5"})
	if err != nil {
		t.Fatal(err)
	}
	next := func(gtid string) {
		t.Helper()
		st.open()
		st.mysqlGTID = nil
		if gtid != "" {
			gs, err := gomysql.ParseMysqlGTIDSet(gtid)
			if err != nil {
				t.Fatal(err)
			}
			st.mysqlGTID = gs.(*gomysql.MysqlGTIDSet)
		}
	}
	next(a + ":6")
	st.commit()
	next(b + ":1")
	next(b + ":2") // the first ends here
	st.commit()
	next("") // anonymous
	st.commit()
	want, _ := gomysql.ParseMysqlGTIDSet(a + ":1-6," + b + ":1-2")
	got, err := gomysql.ParseMysqlGTIDSet(st.current().GTIDSet)
	if err != nil || !got.Equal(want) {
		t.Fatalf("GTID set %q (%v), want %s", st.current().GTIDSet, err, want)
	}
	if fresh, err := newStreamState(FlavorMySQL, BinlogPosition{}); err != nil || fresh.gset == nil || !fresh.gset.IsEmpty() {
		t.Fatalf("no position on MySQL: %+v, %v; want an empty GTID set (all of the binlog)", fresh, err)
	}
	if fo, err := newStreamState(FlavorMySQL, BinlogPosition{File: "binlog.000002", Offset: 4}); err != nil || fo.gset != nil {
		t.Fatalf("a file/offset position on MySQL: %+v, %v; want no GTID set", fo, err)
	}
	if _, err := newStreamState(FlavorMySQL, BinlogPosition{GTIDSet: "0-1-5"}); err == nil {
		t.Fatal("a MariaDB GTID set was accepted as a MySQL one")
	}
}
