package demo_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/hyapp/roomflow/cmd/roomflow/command"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/tools/demo"
)

// TestPipelineEndToEnd runs every component together (as `roomflow run` and
// the demo do) on kfake, MariaDB and the fake Tencent IM, feeds a loadgen
// scenario through room_outbox, and requires every fact in MySQL to equal
// the independent oracle and every IM message to be delivered. Every third
// envelope leaves app_code out: it is the configured one at every stage.
// Lucky gifts are drawn by `roomflow lucky` (with the fake wallet) before
// their rows are written, as room-service does, on short commit-reveal
// days verified at the end.
func TestPipelineEndToEnd(t *testing.T) {
	sc := loadgen.DefaultScenario()
	sc.Sessions, sc.Gifts, sc.Users, sc.Rooms = 400, 400, 80, 20
	sc.OmitAppCodeEvery = 3
	sc.EventIDPrefix = testenv.UniqueName(t)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	base := command.DemoOptions()
	res, err := demo.Run(ctx, demo.Options{
		Scenario: sc, ServerDSN: testenv.ServerDSN(), Database: testenv.UniqueName(t),
		Timeout: 90 * time.Second, LogLevel: "error", Out: &out, Specs: base.Specs, Check: base.Check,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !res.Report.OK() || res.Report.LifetimeRows == 0 || res.Report.DailyRows == 0 || res.Report.PoolRows == 0 {
		t.Fatalf("facts: %+v", res.Report)
	}
	if !res.Verify.OK() || res.VerifyEvents != res.Events || res.Verify.LifetimeRows != res.Report.LifetimeRows {
		t.Fatalf("verify from the event log: %d of %d events, %+v", res.VerifyEvents, res.Events, res.Verify)
	}
	// The totals topics equal the facts after the load (Run compares them
	// key by key); every user with a lifetime row has its total.
	if res.Totals.Lifetime == 0 || res.Totals.Daily == 0 || res.Totals.Lifetime != res.Report.LifetimeRows {
		t.Fatalf("totals topics: %+v for %d lifetime rows", res.Totals, res.Report.LifetimeRows)
	}
	if res.IMAccepted != res.IMExpected || res.Delivered != res.Events {
		t.Fatalf("IM: %d/%d accepted, %d/%d delivered", res.IMAccepted, res.IMExpected, res.Delivered, res.Events)
	}
	// Every lucky gift went through the draw service; every paid draw was
	// granted with exactly one wallet credit (Run checks the records
	// against the wallet's ledger), and the pools reconcile (Compare:
	// total_in = the gifts' inflow, balance = funded + in - out).
	if res.Lucky.Draws == 0 || res.Lucky.Draws+len(res.Lucky.Rejected) == 0 || len(res.Lucky.Rejected) != 0 || res.Lucky.Hits == 0 || res.Credits != res.Lucky.Hits {
		t.Fatalf("lucky: %+v, %d wallet credits", res.Lucky, res.Credits)
	}
	// The draws ran on short commit-reveal days: each day's seed was
	// revealed and every draw recomputed from it (Run fails on a
	// difference).
	drawn := 0
	for _, f := range res.Fairness {
		drawn += f.Draws
	}
	if len(res.Fairness) == 0 || drawn != res.Lucky.Draws {
		t.Fatalf("fairness: %d draws verified over %d days, %d drawn", drawn, len(res.Fairness), res.Lucky.Draws)
	}
}
