// Command failover measures how long roomflow stops working after a
// process is killed with SIGKILL, with the real `roomflow` binary as child
// processes, an in-process kfake cluster (3 brokers) and the local MariaDB:
//
//	go run ./benchmarks/failover                 # every scenario, 5 kills each, static members
//	go run ./benchmarks/failover -n 3 -static=false -scenarios relay,run   # dynamic members, for comparison
//
// Scenarios (-scenarios, comma separated):
//
//	relay               the only relay is killed and restarted at once (a container restart)
//	relay-standby       the leading relay is killed, a standby replica runs, no restart (a lost node)
//	relay-standby-restart  as relay-standby, and the killed relay is restarted at once
//	run                 the only `roomflow run` is killed and restarted at once
//	run-standby         one of two `roomflow run` replicas is killed, no restart
//	run-standby-restart as run-standby, and the killed replica is restarted at once
//
// Each kill is timed from the SIGKILL to the moment a room_outbox row
// inserted right after it is visible downstream: for the relay, committed
// in the room events topic; for `run`, in the room events topic (relay) and
// as the mic event's consumption row in MySQL (relay, room processor, mic
// processor and sink all working again). Children get --instance-id
// (static group members) unless -static=false. kafka.session_timeout and
// relay.failover_timeout keep their defaults (15s) unless set.
package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hyapp/roomflow/benchmarks/internal/rfproc"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/producers/relay"
)

// scenario is one kind of kill.
type scenario struct {
	name    string
	command string // relay or run
	standby bool   // a second replica runs
	restart bool   // the killed process is restarted at once
}

var scenarios = []scenario{
	{"relay", "relay", false, true},
	{"relay-standby", "relay", true, false},
	{"relay-standby-restart", "relay", true, true},
	{"run", "run", false, true},
	{"run-standby", "run", true, false},
	{"run-standby-restart", "run", true, true},
}

type options struct {
	n         int
	static    bool
	bin       string
	server    string
	session   time.Duration
	failover  time.Duration
	scenarios string
	keepLogs  bool
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 5, "kills per scenario")
	flag.BoolVar(&o.static, "static", true, "pass --instance-id (static group membership) to the children")
	flag.StringVar(&o.bin, "bin", "", "roomflow binary (empty: go build ./cmd/roomflow into a temporary directory)")
	flag.StringVar(&o.server, "mysql", cmp.Or(os.Getenv("ROOMFLOW_TEST_MYSQL_DSN"), "root@tcp(127.0.0.1:3306)/"), "MySQL server DSN (a throwaway database is created)")
	flag.DurationVar(&o.session, "session", 15*time.Second, "kafka.session_timeout")
	flag.DurationVar(&o.failover, "failover", 15*time.Second, "relay.failover_timeout")
	flag.StringVar(&o.scenarios, "scenarios", "", "comma-separated scenarios (empty: all)")
	flag.BoolVar(&o.keepLogs, "keep-logs", false, "keep the children's logs (their directory is printed)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
		os.Exit(1)
	}
}

// bench is the shared setup of every scenario.
type bench struct {
	o      options
	run    *rfproc.Runner
	cfg    *config.Config
	db     *sql.DB
	adm    *kadm.Client
	events []loadgen.Event
	next   int // next marker event
	seen   *rfproc.Tail
}

func run(ctx context.Context, o options) error {
	env, err := rfproc.NewEnv(ctx, rfproc.EnvOptions{Name: "failover", Bin: o.bin, MySQLServer: o.server, KeepLogs: o.keepLogs,
		Configure: func(c *config.Config) {
			c.Kafka.Partitions = 6
			c.Kafka.SessionTimeout = config.Duration(o.session)
			c.Relay.FailoverTimeout = config.Duration(o.failover)
			c.Shutdown.Timeout = config.Duration(3 * time.Second)
		}})
	if err != nil {
		return err
	}
	defer env.Close()
	b := &bench{o: o, run: env.Runner, cfg: &env.Config, db: env.DB, adm: env.Admin}
	dbName := env.DBName
	cfg := env.Config
	// Markers: mic events only (each reaches the sink's consumption table).
	sc := loadgen.DefaultScenario()
	sc.Sessions, sc.Gifts, sc.Users, sc.Rooms = 2000, 0, 100, 20
	sc.EventIDPrefix = dbName
	b.events, _ = sc.Generate()
	if b.seen, err = rfproc.StartTail(ctx, cfg.Kafka, "failover-tail", cfg.Kafka.Topics.RoomEvents, rfproc.EventIDHeader); err != nil {
		return err
	}
	defer b.seen.Stop()

	fmt.Printf("roomflow failover: %d kills per scenario, %s members, kafka.session_timeout %s, relay.failover_timeout %s, kfake 3 brokers, %d partitions\n",
		o.n, map[bool]string{true: "static (--instance-id)", false: "dynamic"}[o.static], o.session, o.failover, cfg.Kafka.Partitions)
	fmt.Printf("%-22s %-26s %8s %8s %8s  %s\n", "scenario", "stage", "min", "median", "max", "samples (s)")
	for _, s := range scenarios {
		if o.scenarios != "" && !slices.Contains(strings.Split(o.scenarios, ","), s.name) {
			continue
		}
		res, err := b.scenario(ctx, s)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		for _, st := range []string{"relaying again", "processing again (MySQL)"} {
			if d := res[st]; len(d) > 0 {
				printRow(s.name, st, d)
			}
		}
	}
	return nil
}

func printRow(name, stage string, d []time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	var samples []string
	for _, x := range d {
		samples = append(samples, fmt.Sprintf("%.2f", x.Seconds()))
	}
	fmt.Printf("%-22s %-26s %7.2fs %7.2fs %7.2fs  %s\n", name, stage, s[0].Seconds(), s[len(s)/2].Seconds(), s[len(s)-1].Seconds(), strings.Join(samples, " "))
}

func (b *bench) start(command, id string) (*rfproc.Child, error) {
	// A client id of its own tells which replica leads (settle, leader).
	cfg := *b.cfg
	cfg.Kafka.ClientID = "rf-" + id
	return b.run.Start(rfproc.Spec{Command: command, ID: id, InstanceID: b.o.static, Config: &cfg})
}

// groups are the consumer groups the command's processes join.
func (b *bench) groups(command string) []string {
	gs := []string{relay.LeaderGroup(b.cfg.Relay.TransactionalID)}
	if command == "run" {
		gs = append(gs, b.cfg.Process.RoomGroup, b.cfg.Process.MicGroup, b.cfg.Sink.Group, b.cfg.OutboxWorker.Group)
	}
	return gs
}

// settle waits until every group of command is stable with members
// members: a standby has joined and the rebalances it caused are over.
func (b *bench) settle(ctx context.Context, command string, members int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		dg, err := b.adm.DescribeGroups(ctx, b.groups(command)...)
		if err == nil {
			ok := true
			for _, g := range dg {
				if g.Err != nil || g.State != "Stable" || len(g.Members) != members {
					ok = false
				}
			}
			if ok {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("groups %v did not settle with %d members", b.groups(command), members)
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// markersPerKill is how many mic events are inserted after each kill: over
// 20 rooms and 100 users, enough to land on every partition, so the
// replica that was killed owned some of them.
const markersPerKill = 30

// markers inserts the next markersPerKill mic events into room_outbox in
// one transaction and returns their ids.
func (b *bench) markers(ctx context.Context) ([]string, error) {
	if b.next+markersPerKill > len(b.events) {
		return nil, errors.New("out of marker events")
	}
	evs := b.events[b.next : b.next+markersPerKill]
	b.next += markersPerKill
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.Envelope.EventId
	}
	_, err := loadgen.WriteOutbox(ctx, b.db, evs, len(evs), 0)
	return ids, err
}

// await waits until every marker passed the stages command runs (relayed
// into the room events topic; for run also consumed by the sink) and
// returns when each stage had all of them.
func (b *bench) await(ctx context.Context, command string, ids []string, timeout time.Duration) (relayed, processed time.Time, err error) {
	deadline := time.Now().Add(timeout)
	for {
		if relayed.IsZero() && b.seen.Count(ids) == len(ids) {
			relayed = time.Now()
		}
		if command == "run" && processed.IsZero() {
			var n int
			q := "SELECT COUNT(*) FROM user_mic_event_consumption WHERE event_id IN (?" + strings.Repeat(",?", len(ids)-1) + ")"
			args := make([]any, len(ids))
			for i, id := range ids {
				args[i] = id
			}
			if err := b.db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
				return relayed, processed, err
			}
			if n == len(ids) {
				processed = time.Now()
			}
		}
		if !relayed.IsZero() && (command != "run" || !processed.IsZero()) {
			return relayed, processed, nil
		}
		if time.Now().After(deadline) {
			return relayed, processed, fmt.Errorf("markers not through within %s", timeout)
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return relayed, processed, ctx.Err()
		}
	}
}

// leader is the replica whose relay leads: the member of the leader group
// assigned partition 0 of the relay offsets topic, told by its client id.
func (b *bench) leader(ctx context.Context, ids []string) (string, error) {
	dg, err := b.adm.DescribeGroups(ctx, relay.LeaderGroup(b.cfg.Relay.TransactionalID))
	if err != nil {
		return "", err
	}
	for _, g := range dg {
		for _, m := range g.Members {
			a, ok := m.Assigned.AsConsumer()
			if !ok {
				continue
			}
			for _, t := range a.Topics {
				if t.Topic == b.cfg.Kafka.Topics.RelayOffsets && slices.Contains(t.Partitions, 0) {
					for _, id := range ids {
						if strings.HasPrefix(m.ClientID, "rf-"+id+"-") {
							return id, nil
						}
					}
				}
			}
		}
	}
	return "", errors.New("no relay leads")
}

// scenario runs o.n kills of s and returns the durations per stage.
func (b *bench) scenario(ctx context.Context, s scenario) (map[string][]time.Duration, error) {
	out := map[string][]time.Duration{}
	ids := []string{s.name + "-a", s.name + "-b"}
	live := map[string]*rfproc.Child{}
	defer func() {
		for _, c := range live {
			c.Signal(syscall.SIGTERM)
		}
	}()
	ready := func(command string) error {
		members := len(live)
		if err := b.settle(ctx, command, members); err != nil {
			return err
		}
		ids, err := b.markers(ctx)
		if err != nil {
			return err
		}
		_, _, err = b.await(ctx, command, ids, 2*time.Minute)
		return err
	}
	startAll := func() error {
		for i, id := range ids {
			if i == 1 && !s.standby {
				break
			}
			if live[id] != nil {
				continue
			}
			c, err := b.start(s.command, id)
			if err != nil {
				return err
			}
			live[id] = c
			// One at a time: the first one leads (the relay) before the
			// standby joins.
			if err := ready(s.command); err != nil {
				return err
			}
		}
		return nil
	}
	if err := startAll(); err != nil {
		return nil, err
	}
	for range b.o.n {
		// Kill the replica whose relay leads: with a standby, killing
		// the other one would stop nothing the markers need.
		victim, err := b.leader(ctx, ids)
		if err != nil {
			return nil, err
		}
		c := live[victim]
		t0 := time.Now()
		c.Signal(syscall.SIGKILL)
		delete(live, victim)
		if s.restart {
			nc, err := b.start(s.command, victim)
			if err != nil {
				return nil, err
			}
			live[victim] = nc
		}
		markers, err := b.markers(ctx)
		if err != nil {
			return nil, err
		}
		relayed, processed, err := b.await(ctx, s.command, markers, 3*time.Minute)
		if err != nil {
			return nil, err
		}
		out["relaying again"] = append(out["relaying again"], relayed.Sub(t0))
		if s.command == "run" {
			out["processing again (MySQL)"] = append(out["processing again (MySQL)"], processed.Sub(t0))
		}
		// Back to the starting shape before the next kill: the killed
		// replica returns (as the standby when it was not restarted).
		if err := startAll(); err != nil {
			return nil, err
		}
		if err := ready(s.command); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
