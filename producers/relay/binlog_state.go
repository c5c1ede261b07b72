package relay

import (
	"fmt"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// streamState is where the binlog stream is: the GTID set and file/offset
// after the last complete transaction, and the transaction in progress.
type streamState struct {
	flavor string
	gset   gomysql.GTIDSet // *MariadbGTIDSet or *MysqlGTIDSet; nil: file/offset only
	file   string
	offset uint64

	inTxn      bool
	opened     bool // the open transaction's GTID event was seen in this stream
	standalone bool // it ends with its first query (DDL), not at an XID or COMMIT
	gtid       gomysql.MariadbGTID
	mysqlGTID  *gomysql.MysqlGTIDSet // MySQL: the open transaction's GTID; nil when anonymous
	start      BinlogPosition        // the position before the open transaction
	rows       uint64                // relay-table insert rows of the open transaction seen so far
	skip       uint64                // rows of the first transaction relayed before and not seen yet
}

// newStreamState is the state of a stream starting at pos; it fails on a
// GTID set that does not parse.
func newStreamState(flavor string, pos BinlogPosition) (*streamState, error) {
	st := &streamState{flavor: flavor, file: pos.File, offset: pos.Offset, skip: pos.Rows}
	switch {
	case flavor == FlavorMySQL && (pos.GTIDSet != "" || pos.File == ""):
		gs, err := gomysql.ParseMysqlGTIDSet(pos.GTIDSet)
		if err != nil {
			return nil, fmt.Errorf("relay: stored GTID set %q: %w", pos.GTIDSet, err)
		}
		st.gset = gs
	case flavor == FlavorMariaDB && (pos.GTIDSet != "" || pos.File == ""):
		gs, err := gomysql.ParseMariadbGTIDSet(pos.GTIDSet)
		if err != nil {
			return nil, fmt.Errorf("relay: stored GTID set %q: %w", pos.GTIDSet, err)
		}
		st.gset = lastPerDomain(gs.(*gomysql.MariadbGTIDSet))
	}
	if pos.Rows > 0 {
		// Inside a transaction already: until its events arrive, the
		// position to store is still its start plus the rows done, never
		// its start alone (that would relay those rows again).
		st.inTxn, st.start = true, pos
		st.start.Rows = 0
	}
	return st, nil
}

func (s *streamState) done() BinlogPosition {
	p := BinlogPosition{Flavor: s.flavor, File: s.file, Offset: s.offset}
	if s.gset != nil {
		p.GTIDSet = s.gset.String()
	}
	return p
}

// current is the position to store now: between transactions the done
// position, inside one its start plus the rows of it relayed.
func (s *streamState) current() BinlogPosition {
	if s.inTxn {
		// Rows still to skip were relayed before: they count as done
		// even before their events arrive.
		p := s.start
		p.Rows = s.rows + s.skip
		return p
	}
	return s.done()
}

func (s *streamState) begin() {
	s.inTxn, s.start, s.rows = true, s.done(), 0
}

// commit ends the open transaction. Its GTID replaces its domain's in the
// set: a MariaDB GTID position holds the last GTID of each domain, whatever
// server wrote it (after a failover the new primary's server id), and a
// connect state with two GTIDs of one domain is refused.
func (s *streamState) commit() {
	switch gs := s.gset.(type) {
	case *gomysql.MariadbGTIDSet:
		if g := s.gtid; g.SequenceNumber > 0 {
			gs.Sets[g.DomainID] = map[uint32]*gomysql.MariadbGTID{g.ServerID: &g}
		}
	case *gomysql.MysqlGTIDSet:
		if s.mysqlGTID != nil {
			_ = gs.Add(*s.mysqlGTID) // adding never fails
		}
	}
	s.inTxn, s.opened, s.standalone, s.rows, s.skip, s.mysqlGTID = false, false, false, 0, 0, nil
}

// open starts the transaction of a GTID event; a transaction still open
// ended before it (only committed transactions reach the binlog: one
// whose end event was not recognised, such as XA, ended here). A
// transaction resumed inside (Rows) is not open until its GTID event.
func (s *streamState) open() {
	if s.inTxn && s.opened {
		s.commit()
	}
	s.begin()
	s.opened = true
}

// openMariaDB starts the transaction of a MariaDB GTID event.
func (s *streamState) openMariaDB(ev *replication.MariadbGTIDEvent) {
	s.open()
	s.gtid, s.standalone = ev.GTID, ev.IsStandalone()
}

// openMySQL starts the transaction of a MySQL GTID event: a DML
// transaction goes on with a BEGIN query, DDL is the one query after it.
func (s *streamState) openMySQL(ev *replication.GTIDEvent) error {
	s.open()
	s.standalone = true
	if ev.GNO > 0 { // 0: an anonymous transaction (gtid_mode OFF)
		next, err := ev.GTIDNext()
		if err != nil {
			return fmt.Errorf("relay: binlog GTID event: %w", err)
		}
		s.mysqlGTID = next.(*gomysql.MysqlGTIDSet)
	}
	return nil
}

// query moves the stream past a query event ending at logPos: BEGIN opens
// a DML transaction's body, COMMIT or ROLLBACK ends it, and any query ends
// a standalone (DDL) transaction.
func (s *streamState) query(logPos uint32, query []byte) {
	s.offset = uint64(logPos)
	q := strings.ToUpper(strings.TrimSpace(string(query)))
	if q == "BEGIN" {
		s.standalone = false
		return
	}
	if s.inTxn && (s.standalone || q == "COMMIT" || q == "ROLLBACK") {
		s.commit()
	}
}

// lastPerDomain keeps the GTID with the highest sequence number of each
// domain: a position stored by an earlier relay version after a failover
// can hold several.
func lastPerDomain(gs *gomysql.MariadbGTIDSet) *gomysql.MariadbGTIDSet {
	for d, byServer := range gs.Sets {
		var last *gomysql.MariadbGTID
		for _, g := range byServer {
			if last == nil || g.SequenceNumber > last.SequenceNumber {
				last = g
			}
		}
		gs.Sets[d] = map[uint32]*gomysql.MariadbGTID{last.ServerID: last}
	}
	return gs
}
