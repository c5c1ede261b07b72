package luckydraw_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// fundState is what a fund can change: the room pool r9's balance and
// funded, its funds rows, and its pools fund rows in the trail.
type fundState struct{ balance, funded, funds, logged int64 }

func readFundState(t *testing.T, db *sql.DB) fundState {
	t.Helper()
	var s fundState
	db.QueryRow(`SELECT balance, funded FROM lucky_pools WHERE scope_id = 'r9'`).Scan(&s.balance, &s.funded)
	for q, n := range map[string]*int64{
		`SELECT COUNT(*) FROM lucky_pool_funds`:                             &s.funds,
		`SELECT COUNT(*) FROM lucky_admin_log WHERE command = 'pools fund'`: &s.logged,
	} {
		if err := db.QueryRow(q).Scan(n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return s
}

// TestFundIDAppliesOnce: `pools fund` retried after a timeout or a lost
// answer funded the pool twice. With a fund id the first run applies; a
// repeat with the same parameters changes nothing, logs nothing and says
// when it was applied; one with other parameters is ErrFundIDReused,
// nothing written; a padded or over-long id is refused. Ids are byte
// exact (F1 is not f1). Without an id every call adds, as before.
func TestFundIDAppliesOnce(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	a := testAdmin(t, m.DB)
	floor := int64(10)
	c, err := a.FundPoolOnce(ctx, "f1", app, "room", "r9", 500, &floor)
	if err != nil || c.Note != "" || c.New != "balance 500, reserve_floor 10, fund_id f1" {
		t.Fatalf("first fund: %+v %v", c, err)
	}
	want := fundState{balance: 500, funded: 500, funds: 1, logged: 1}
	c, err = a.FundPoolOnce(ctx, "f1", app, "room", "r9", 500, &floor)
	if err != nil || !strings.Contains(c.Note, `fund id "f1" already applied at `) || !strings.Contains(c.Note, "by test") ||
		c.Old != "balance 500, reserve_floor 10" || c.New != c.Old {
		t.Fatalf("repeat: %+v %v", c, err)
	}
	if s := readFundState(t, m.DB); s != want {
		t.Fatalf("after the repeat: %+v, want %+v", s, want)
	}
	other := int64(20)
	for name, call := range map[string]func() (luckydraw.Change, error){
		"amount":    func() (luckydraw.Change, error) { return a.FundPoolOnce(ctx, "f1", app, "room", "r9", 600, &floor) },
		"floor":     func() (luckydraw.Change, error) { return a.FundPoolOnce(ctx, "f1", app, "room", "r9", 500, &other) },
		"no floor":  func() (luckydraw.Change, error) { return a.FundPoolOnce(ctx, "f1", app, "room", "r9", 500, nil) },
		"scope":     func() (luckydraw.Change, error) { return a.FundPoolOnce(ctx, "f1", app, "room", "r8", 500, &floor) },
		"padded id": func() (luckydraw.Change, error) { return a.FundPoolOnce(ctx, "f1 ", app, "room", "r9", 500, &floor) },
		"over 128": func() (luckydraw.Change, error) {
			return a.FundPoolOnce(ctx, strings.Repeat("f", 129), app, "room", "r9", 500, nil)
		},
		"reused other": func() (luckydraw.Change, error) { return a.FundPoolOnce(ctx, "f1", app, "gift", "rose", 500, &floor) },
	} {
		c, err := call()
		wantReused := !strings.HasPrefix(name, "padded") && !strings.HasPrefix(name, "over")
		if err == nil || errors.Is(err, luckydraw.ErrFundIDReused) != wantReused || !strings.Contains(err.Error(), "fund id") {
			t.Errorf("%s: %+v %v", name, c, err)
		}
	}
	if s := readFundState(t, m.DB); s != want {
		t.Fatalf("after the refused funds: %+v, want %+v", s, want)
	}
	if c, err := a.FundPoolOnce(ctx, "F1", app, "room", "r9", 1, nil); err != nil || c.Note != "" {
		t.Fatalf("F1 beside f1: %+v %v", c, err)
	}
	for range 2 {
		if c, err := a.FundPool(ctx, app, "room", "r9", 100, nil); err != nil || c.Note != "" || strings.Contains(c.New, "fund_id") {
			t.Fatalf("fund without an id: %+v %v", c, err)
		}
	}
	if s, want := readFundState(t, m.DB), (fundState{balance: 701, funded: 701, funds: 2, logged: 4}); s != want {
		t.Fatalf("after F1 and two funds without an id: %+v, want %+v", s, want)
	}
}

// TestFundIDConcurrentRunsApplyOnce: two runs of one fund id at once (two
// pods of a Job). The second's insert of the id waits on the first's
// uncommitted row: when the first commits, the second finds its row and
// changes nothing; when the first fails and rolls back, the second
// applies. Then eight runs at once, unordered: exactly one applies.
func TestFundIDConcurrentRunsApplyOnce(t *testing.T) {
	for name, firstFails := range map[string]bool{"first commits": false, "first rolls back": true} {
		t.Run(name, func(t *testing.T) { fundTwoPods(t, firstFails) })
	}
	t.Run("eight at once", func(t *testing.T) {
		m := testenv.NewMySQL(t)
		var wg sync.WaitGroup
		var mu sync.Mutex
		applied, repeats := 0, 0
		for range 8 {
			wg.Go(func() {
				c, err := testAdmin(t, m.DB).FundPoolOnce(context.Background(), "job-8", app, "room", "r9", 300, nil)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Errorf("concurrent run: %v", err)
				case c.Note == "":
					applied++
				default:
					repeats++
				}
			})
		}
		wg.Wait()
		if s, want := readFundState(t, m.DB), (fundState{balance: 300, funded: 300, funds: 1, logged: 1}); applied != 1 || repeats != 7 || s != want {
			t.Errorf("8 concurrent runs: %d applied, %d repeats, %+v; want 1, 7, %+v", applied, repeats, s, want)
		}
	})
}

// fundTwoPods runs one fund id twice, the second while the first holds
// its uncommitted fund row; firstFails makes the first fail after it.
func fundTwoPods(t *testing.T, firstFails bool) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	inserted, release := make(chan struct{}), make(chan struct{})
	// The first run stops between its fund row and the pool upsert.
	hooked := testenv.OpenHooked(t, m.DSN, testenv.SQLHooks{Statement: func(_ context.Context, q string) error {
		if strings.HasPrefix(q, "INSERT INTO lucky_pools") {
			close(inserted)
			<-release
			if firstFails {
				return errors.New("injected: the first run fails after its fund row")
			}
		}
		return nil
	}})
	first, err := luckydraw.NewAdmin(hooked, luckydraw.AdminConfig{Operator: "pod-a", Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	second, err := luckydraw.NewAdmin(m.DB, luckydraw.AdminConfig{Operator: "pod-b", Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var firstErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, firstErr = first.FundPoolOnce(ctx, "job-7", app, "room", "r9", 500, nil)
	}()
	<-inserted
	var c luckydraw.Change
	secondDone := make(chan error, 1)
	go func() {
		var err error
		c, err = second.FundPoolOnce(ctx, "job-7", app, "room", "r9", 500, nil)
		secondDone <- err
	}()
	// The second must be waiting on the first's uncommitted fund row.
	waitErr := waitForFundInsert(m.DB)
	if waitErr == nil {
		select {
		case err := <-secondDone:
			waitErr = fmt.Errorf("the second run ended while the first held its fund row: %+v %v", c, err)
		case <-time.After(300 * time.Millisecond):
		}
	}
	close(release)
	if waitErr != nil {
		<-done
		t.Fatal(waitErr)
	}
	<-done
	err = <-secondDone
	switch {
	case firstFails && (firstErr == nil || err != nil || c.Note != ""):
		t.Errorf("first failed (%v): the second should apply: %+v %v", firstErr, c, err)
	case !firstFails && (firstErr != nil || err != nil || !strings.Contains(c.Note, "already applied") || !strings.Contains(c.Note, "by pod-a")):
		t.Errorf("first applied (%v): the second should change nothing: %+v %v", firstErr, c, err)
	}
	if s, want := readFundState(t, m.DB), (fundState{balance: 500, funded: 500, funds: 1, logged: 1}); s != want {
		t.Errorf("first fails %v: %+v, want %+v", firstFails, s, want)
	}
}

// waitForFundInsert returns once a connection is running the insert of
// a lucky_pool_funds row (MariaDB lists no INNODB_TRX row for a
// transaction waiting in its first write, the processlist shows it).
func waitForFundInsert(db *sql.DB) error {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT INTO lucky_pool_funds%'`).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
	}
	return errors.New("the second run never reached its fund row insert")
}

// TestFundIDLostAnswer: the fund commits but its answer is lost (the
// connection drops at the commit), so the run fails as the operator sees
// it. The retry with the same fund id reports the fund applied and the
// pool holds it once; without an id, the same retry funds the pool again
// (unchanged, the reason scripts should pass one).
func TestFundIDLostAnswer(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	lost := testenv.OpenHooked(t, m.DSN, testenv.SQLHooks{Commit: func(_ []string, commit func() error) error {
		if err := commit(); err != nil {
			return err
		}
		return driver.ErrBadConn
	}})
	a, err := luckydraw.NewAdmin(lost, luckydraw.AdminConfig{Operator: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := a.FundPoolOnce(ctx, "lost-1", app, "room", "r9", 500, nil); err == nil {
		t.Fatalf("a fund whose answer was lost succeeded: %+v", c)
	}
	c, err := testAdmin(t, m.DB).FundPoolOnce(ctx, "lost-1", app, "room", "r9", 500, nil)
	if err != nil || !strings.Contains(c.Note, "already applied") {
		t.Fatalf("retry after the lost answer: %+v %v", c, err)
	}
	if s, want := readFundState(t, m.DB), (fundState{balance: 500, funded: 500, funds: 1, logged: 1}); s != want {
		t.Errorf("after the lost answer and its retry: %+v, want %+v", s, want)
	}
	if _, err := a.FundPool(ctx, app, "room", "r9", 500, nil); err == nil {
		t.Fatal("a fund without an id whose answer was lost succeeded")
	}
	if _, err := testAdmin(t, m.DB).FundPool(ctx, app, "room", "r9", 500, nil); err != nil {
		t.Fatal(err)
	}
	if s, want := readFundState(t, m.DB), (fundState{balance: 1500, funded: 1500, funds: 1, logged: 3}); s != want {
		t.Errorf("without an id, the lost answer and its retry: %+v, want %+v", s, want)
	}
}
