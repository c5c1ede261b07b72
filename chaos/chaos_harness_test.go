package chaos

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
	"github.com/hyapp/roomflow/services/luckydraw/wallet/walletfake"
	"github.com/hyapp/roomflow/sinks/tencentim"
	"github.com/hyapp/roomflow/sinks/tencentim/imfake"
)

// chaosChild is one incarnation of a component: a child process of the
// roomflow binary.
type chaosChild struct {
	cmd    *exec.Cmd
	log    string
	done   chan struct{}
	err    error
	killed bool // by the harness (guarded by chaosProc.mu)
}

// awaitSignals waits until the child handles SIGTERM (its first log line is
// chaosSignalsReady), it exits, or d passes; false means d passed.
func (c *chaosChild) awaitSignals(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if b, _ := os.ReadFile(c.log); bytes.Contains(b, []byte(chaosSignalsReady)) {
			return true
		}
		select {
		case <-c.done:
			return true
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func (c *chaosChild) tail(lines int) string {
	b, _ := os.ReadFile(c.log)
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// chaosProc is one component of the pipeline (a relay, a processor
// instance, ...) run as successive child processes: the harness kills,
// stops and restarts it; one that exits by itself is restarted too, as a
// Kubernetes Deployment would, and counted.
type chaosProc struct {
	h    *chaosHarness
	name string
	args []string
	// cfgPath is its own config file ("": the harness's): a draw service
	// replica's names its own lucky.grpc_addr and MySQL user.
	cfgPath string
	// lucky: a draw service replica, outside the pipeline's outage
	// budget (the pipeline does not wait for it).
	lucky bool

	mu        sync.Mutex
	cur       *chaosChild // nil while killed and not yet restarted
	n         int         // incarnations started
	stopped   bool        // SIGSTOPped
	selfExits int
	exitTails []string
}

func (p *chaosProc) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.h.stopping {
		return
	}
	p.n++
	c := &chaosChild{log: fmt.Sprintf("%s/%s.%d.log", p.h.dir, p.name, p.n), done: make(chan struct{})}
	f, err := os.Create(c.log)
	if err != nil {
		p.h.t.Errorf("chaos: %s: %v", p.name, err)
		return
	}
	cfgPath := p.cfgPath
	if cfgPath == "" {
		cfgPath = p.h.cfgPath
	}
	c.cmd = exec.Command(p.h.bin, append(slices.Clone(p.args), "--config", cfgPath)...)
	c.cmd.Stdout, c.cmd.Stderr = f, f
	if err := c.cmd.Start(); err != nil {
		f.Close()
		p.h.t.Errorf("chaos: start %s: %v", p.name, err)
		return
	}
	p.cur = c
	go func() {
		c.err = c.cmd.Wait()
		f.Close()
		close(c.done)
		p.exited(c)
	}()
}

// exited restarts a child that stopped without the harness asking.
func (p *chaosProc) exited(c *chaosChild) {
	p.mu.Lock()
	self := !c.killed && !p.h.stopping && p.cur == c
	var tail string
	if self {
		p.selfExits++
		p.cur = nil
		tail = fmt.Sprintf("%s exited by itself (%v); its log ends:\n%s", filepath.Base(c.log), c.err, c.tail(15))
		p.exitTails = append(p.exitTails, tail)
	}
	p.mu.Unlock()
	if self {
		p.h.logf("%s; restarting it", tail)
		time.Sleep(time.Second)
		p.start()
	}
}

// running returns the current child if it runs and is not stopped.
func (p *chaosProc) running() *chaosChild {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil || p.stopped {
		return nil
	}
	return p.cur
}

// chaosHarness drives the fault schedule of one chaos run.
type chaosHarness struct {
	t       *testing.T
	bin     string // the roomflow binary the children run
	dir     string
	cfgPath string
	k       *testenv.Kafka
	db      *sql.DB // root on the test database: locks and KILL CONNECTION
	appCode string
	// childUser is the MySQL user the pipeline children connect as, so
	// their connections can be told from the harness's own; luckyUser the
	// draw service replicas'.
	childUser, luckyUser string
	// wallet is the fake wallet the draw service replicas credit through
	// (hosted here, so its ledger outlives them); luckyLockTTL their
	// lucky.outbox_lock_ttl.
	wallet       *walletfake.Wallet
	luckyLockTTL time.Duration
	im           *imfake.Server
	session      time.Duration // kafka.session_timeout of the children
	groups       []string
	adm          *kadm.Client
	topics       []string // topics faults may target
	changelog    string   // the mic state changelog
	micInput     string   // the mic processor's input topic
	micGroup     string   // process.mic_group: prefix of the mic transactional ids
	// processors indexes procs: the `roomflow process` instances, each
	// named by its --instance-id; pipeline the components the generic
	// faults pick from; lucky the `roomflow lucky` replicas.
	processors, pipeline, lucky []int
	micStalls                   [][2]time.Time // spans of mic input and restore stalls
	t0                          time.Time      // the children's start: log times are relative to it

	procs []*chaosProc
	rng   *rand.Rand // the schedule: only the scheduling goroutine uses it
	// kinds are the faults drawn (by weight), forced those injected at
	// least once a run: chaosFaultsOf the relay mode.
	kinds  []chaosFault
	forced []string

	wg       sync.WaitGroup // faults still in effect (stopped children, held locks, ...)
	mu       sync.Mutex
	stopping bool
	faults   map[string]int
	active   map[string]int // faults in effect by kind
	skipped  int
	outages  int       // components killed or stopped right now
	lifted   time.Time // when the last fault ended
	kHandles []*kfake.FaultHandle
	armed    []*armed
}

func (h *chaosHarness) logf(format string, args ...any) {
	h.t.Logf("chaos t+%s: %s", time.Since(h.t0).Round(100*time.Millisecond), fmt.Sprintf(format, args...))
}

// count records one injected fault of kind.
func (h *chaosHarness) count(kind, format string, args ...any) {
	h.mu.Lock()
	h.faults[kind]++
	h.mu.Unlock()
	h.logf("%s: %s", kind, fmt.Sprintf(format, args...))
}

// liftedNow records that a fault ended.
func (h *chaosHarness) liftedNow() {
	h.mu.Lock()
	h.lifted = time.Now()
	h.mu.Unlock()
}

// after runs fn after d in the background: the end of a fault of kind in
// effect until then.
func (h *chaosHarness) after(kind string, d time.Duration, fn func()) {
	h.begin(kind)
	go func() {
		time.Sleep(d)
		fn()
		h.end(kind)
	}()
}

// begin and end bracket a fault in effect (heal waits for them all).
func (h *chaosHarness) begin(kind string) {
	h.wg.Add(1)
	h.mu.Lock()
	h.active[kind]++
	h.mu.Unlock()
}

func (h *chaosHarness) end(kind string) {
	h.mu.Lock()
	h.active[kind]--
	h.lifted = time.Now()
	h.mu.Unlock()
	h.wg.Done()
}

func (h *chaosHarness) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(h.rng.Int64N(int64(hi-lo)+1))
}

// settle waits until no consumer group is rebalancing before a process is
// killed or stopped: kfake (unlike a Kafka broker) never expires a member
// killed while it waits for its JoinGroup answer, so such a kill would
// stall the group for the rebalance timeout, which no broker does.
func (h *chaosHarness) settle() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		dg, err := h.adm.DescribeGroups(ctx, h.groups...)
		stable := 0
		if err == nil {
			for _, g := range dg {
				if g.Err == nil && g.State == "Stable" {
					stable++
				}
			}
		}
		if stable == len(h.groups) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.logf("consumer groups did not settle within 20s; going ahead")
}

// chaosFault is one kind of fault and how often it is drawn.
type chaosFault struct {
	kind   string
	weight int
	inject func(h *chaosHarness) bool // false: not applicable now, draw again
}

var chaosFaults = []chaosFault{
	{"sigkill", 4, (*chaosHarness).kill},
	{"sigstop-zombie", 2, (*chaosHarness).zombie},
	{"leader-move", 2, (*chaosHarness).moveLeader},
	{"coordinator-move", 1, (*chaosHarness).moveCoordinators},
	{"fetch-error", 2, (*chaosHarness).fetchError},
	{"produce-error", 1, (*chaosHarness).produceError},
	{"endtxn-error", 1, (*chaosHarness).endTxnError},
	{"endtxn-delay", 2, (*chaosHarness).endTxnDelay},
	{"offset-commit-error", 1, (*chaosHarness).commitError},
	{"mysql-kill-connection", 2, (*chaosHarness).killConnections},
	{"mysql-row-locks", 2, (*chaosHarness).holdLocks},
	{"im-error", 1, (*chaosHarness).imError},
	{"im-slow", 1, (*chaosHarness).imSlow},
	{"im-msgfreqctrl", 1, (*chaosHarness).imFreqCtrl},
	{"im-answer-lost", 1, (*chaosHarness).imAnswerLost},
	// The draw service (issue 16): its replicas killed and stopped beyond
	// their outbox lease, their MySQL connections killed, and the wallet
	// failing, slow or losing answers.
	{"lucky-sigkill", 2, (*chaosHarness).luckyKill},
	{"lucky-zombie", 1, (*chaosHarness).luckyZombie},
	{"lucky-mysql-kill-connection", 1, (*chaosHarness).luckyKillConnections},
	{"wallet-faults", 2, (*chaosHarness).walletFaults},
	{"lucky-pool-lock", 1, (*chaosHarness).luckyPoolLock},
	// The interleavings of issue 10's defects 1-3, each at least once a run.
	{"restore-stall", 1, (*chaosHarness).restoreStall},
	{"zombie-commit", 1, (*chaosHarness).zombieCommit},
	{"mic-input-stall", 0, (*chaosHarness).micInputStall}, // forced only: once a run
}

// forcedFaults happen at least once a run, at a seeded moment of its first
// 60% (or as soon after as they can), besides being drawn by their weight.
var forcedFaults = []string{"restore-stall", "zombie-commit", "mic-input-stall", "lucky-zombie", "wallet-faults", "lucky-pool-lock"}

// chaosBinlogFaults are the binlog profile's faults besides chaosFaults,
// each forced once a run too. Kept apart, so the poll profile draws the
// same schedule from the same seed as before binlog mode.
var chaosBinlogFaults = []chaosFault{
	{"binlog-dump-kill", 2, (*chaosHarness).killBinlogDump},
}

// chaosFaultsOf is the fault kinds of a relay mode and those forced once
// a run.
func chaosFaultsOf(mode relay.Mode) (kinds []chaosFault, forced []string) {
	if mode != relay.ModeBinlog {
		return chaosFaults, forcedFaults
	}
	kinds, forced = slices.Clone(chaosFaults), slices.Clone(forcedFaults)
	for _, f := range chaosBinlogFaults {
		kinds, forced = append(kinds, f), append(forced, f.kind)
	}
	return kinds, forced
}

// run injects faults drawn from the seeded schedule until the deadline.
// Every draw is made whatever the state of the pipeline, so a seed always
// gives the same sequence of faults, targets and parameters; a fault whose
// target is down at its turn is skipped.
func (h *chaosHarness) run(until time.Time, only map[string]bool) {
	var faults []chaosFault
	total := 0
	byKind := map[string]chaosFault{}
	for _, f := range h.kinds {
		if len(only) == 0 || only[f.kind] {
			faults = append(faults, f)
			total += f.weight
			byKind[f.kind] = f
		}
	}
	span := time.Until(until) * 6 / 10
	forced := map[string]time.Time{}
	for _, k := range h.forced {
		at := time.Now().Add(span / 10).Add(time.Duration(h.rng.Int64N(int64(span * 9 / 10))))
		if _, ok := byKind[k]; ok {
			forced[k] = at
		}
	}
	for {
		gap := h.between(time.Second, 4*time.Second)
		if time.Now().Add(gap).After(until) {
			return
		}
		time.Sleep(gap)
		var f *chaosFault
		if total > 0 {
			n := h.rng.IntN(total)
			for i := range faults {
				if n -= faults[i].weight; n < 0 {
					f = &faults[i]
					break
				}
			}
		}
		for _, k := range h.forced {
			if at, ok := forced[k]; ok && time.Now().After(at) {
				ff := byKind[k]
				if ff.inject(h) {
					delete(forced, k)
					f = nil
				} else { // not now: again in 10s, the drawn fault meanwhile
					forced[k] = time.Now().Add(10 * time.Second)
					h.logf("%s: not now (its target is down or busy); again in 10s", k)
				}
				break
			}
		}
		if f == nil {
			continue
		}
		if !f.inject(h) {
			h.mu.Lock()
			h.skipped++
			h.mu.Unlock()
			h.logf("%s: skipped (its target is down or busy)", f.kind)
		}
	}
}

// pick draws a pipeline component; nil when it is down or stopped, or when two are
// already (at most two outages at once, so the pipeline keeps moving well
// within the timer margins).
func (h *chaosHarness) pick() *chaosProc { return h.pickOf(h.pipeline) }

// pickOf draws one of the components procs indexes, as pick does (the
// draw service replicas are outside the budget: both may be down).
func (h *chaosHarness) pickOf(procs []int) *chaosProc {
	p := h.procs[procs[h.rng.IntN(len(procs))]]
	if (!p.lucky && h.busy()) || p.running() == nil || !h.processorMaySpare(p, time.Now().Add(h.session+5*time.Second)) {
		return nil
	}
	return p
}

// processorMaySpare reports whether p may be taken out until about end:
// any component but a processor instance; a processor only while the
// other one runs and outside a mic stall's 20s margin. The timer closes
// the oracle predicts assume the room and mic processing keeps up within
// that margin: with both instances out right after an input stall, a
// down written during the stall reached the mic input after its session's
// due time on a loaded machine, and the timer closed it, as it must.
func (h *chaosHarness) processorMaySpare(p *chaosProc, end time.Time) bool {
	if !slices.Contains(h.processors, slices.Index(h.procs, p)) {
		return true
	}
	for _, i := range h.processors {
		if q := h.procs[i]; q != p && q.running() == nil {
			return false
		}
	}
	return !h.nearMicStall(end)
}

func (h *chaosHarness) busy() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.outages >= 2
}

func (h *chaosHarness) outage(delta int) {
	h.mu.Lock()
	h.outages += delta
	h.mu.Unlock()
}

// outageOf counts an outage of p: a pipeline component's in the budget.
func (h *chaosHarness) outageOf(p *chaosProc, delta int) {
	if !p.lucky {
		h.outage(delta)
	}
}

// kill SIGKILLs a component and restarts it a moment later.
func (h *chaosHarness) kill() bool {
	restart := h.between(200*time.Millisecond, 3*time.Second)
	p := h.pick()
	if p == nil {
		return false
	}
	h.settle()
	if !h.killNow(p, restart) {
		return false
	}
	h.count("sigkill", "%s (restart in %s)", p.name, restart.Round(time.Millisecond))
	return true
}

// killNow SIGKILLs p's running child and restarts p after restart.
func (h *chaosHarness) killNow(p *chaosProc, restart time.Duration) bool {
	p.mu.Lock()
	c := p.cur
	if c == nil || p.stopped {
		p.mu.Unlock()
		return false
	}
	c.killed = true
	p.cur = nil
	p.mu.Unlock()
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
	h.outageOf(p, 1)
	h.after("sigkill", restart, func() {
		p.start()
		h.outageOf(p, -1)
	})
	return true
}

// zombie SIGSTOPs a component for longer than its session timeout, so its
// partitions (or the relay's leadership) move on while it still believes
// it owns them, then resumes it.
func (h *chaosHarness) zombie() bool {
	d := h.session + h.between(500*time.Millisecond, 3*time.Second)
	p := h.pick()
	if p == nil {
		return false
	}
	h.settle()
	return h.stopFor(p, d, "sigstop-zombie")
}

// stopFor SIGSTOPs p's running child for d, then SIGCONTs it: a fault of
// kind.
func (h *chaosHarness) stopFor(p *chaosProc, d time.Duration, kind string) bool {
	p.mu.Lock()
	c := p.cur
	if c == nil || p.stopped {
		p.mu.Unlock()
		return false
	}
	p.stopped = true
	p.mu.Unlock()
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		p.mu.Lock()
		p.stopped = false
		p.mu.Unlock()
		return false
	}
	h.outageOf(p, 1)
	h.count(kind, "%s stopped for %s", p.name, d.Round(time.Millisecond))
	h.after(kind, d, func() {
		_ = c.cmd.Process.Signal(syscall.SIGCONT)
		p.mu.Lock()
		p.stopped = false
		p.mu.Unlock()
		h.outageOf(p, -1)
	})
	return true
}

func (h *chaosHarness) topicPartition() (string, int32) {
	return h.topics[h.rng.IntN(len(h.topics))], int32(h.rng.IntN(int(h.k.Config.Partitions)))
}

// moveLeader moves one partition's leadership to another broker (a
// rolling restart, a preferred leader election).
func (h *chaosHarness) moveLeader() bool {
	tp, p := h.topicPartition()
	node := int32(h.rng.IntN(3))
	if err := h.k.Fake.MoveTopicPartition(tp, p, node); err != nil {
		h.t.Errorf("chaos: move %s/%d: %v", tp, p, err)
		return false
	}
	h.count("leader-move", "%s/%d to broker %d", tp, p, node)
	h.liftedNow()
	return true
}

// moveCoordinators rehashes every group and transaction coordinator.
func (h *chaosHarness) moveCoordinators() bool {
	h.k.Fake.RehashCoordinators()
	h.count("coordinator-move", "every group and transaction coordinator")
	h.liftedNow()
	return true
}

// fetchError answers one partition's fetches with NOT_LEADER_FOR_PARTITION
// for up to 12s: a leader in transition, which kgo retries silently (the
// stall defect 1 met on the changelog).
func (h *chaosHarness) fetchError() bool {
	tp, p := h.topicPartition()
	d := h.between(time.Second, 12*time.Second)
	fh := h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: tp, Partitions: []int32{p}, Err: kerr.NotLeaderForPartition, Count: -1})
	h.count("fetch-error", "%s/%d NOT_LEADER_FOR_PARTITION for %s", tp, p, d.Round(time.Millisecond))
	h.after("fetch-error", d, fh.Remove)
	return true
}

// counted installs a fault that answers 1 to most requests and records its
// handle so the end of the run can remove what is left of it.
func (h *chaosHarness) counted(kind string, f kfake.Fault, what string, most int) bool {
	f.Count = 1 + h.rng.IntN(most)
	h.mu.Lock()
	h.kHandles = append(h.kHandles, h.k.Fake.Fault(f))
	h.mu.Unlock()
	h.count(kind, "%s: %d× %v", what, f.Count, f.Err)
	h.liftedNow()
	return true
}

func pickErr(r *rand.Rand, errs ...*kerr.Error) *kerr.Error { return errs[r.IntN(len(errs))] }

// produceError fails 1 to 4 produce requests to a topic; REQUEST_TIMED_OUT
// is answered after the batch was appended (the idempotent retry must not
// duplicate it). Each NOT_LEADER or NOT_ENOUGH_REPLICAS answer waits for a
// metadata refresh, kafkax.MetadataRefreshMin apart (it was kgo's 5s, and
// a burst aborted the relay's transaction: docs/reliability.md, finding 2).
func (h *chaosHarness) produceError() bool {
	tp, _ := h.topicPartition()
	return h.counted("produce-error", kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: tp,
		Err: pickErr(h.rng, kerr.NotLeaderForPartition, kerr.RequestTimedOut, kerr.NotEnoughReplicas)}, tp, 4)
}

// endTxnError fails EndTxn at the transaction coordinator.
func (h *chaosHarness) endTxnError() bool {
	return h.counted("endtxn-error", kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TopLevel: true,
		Err: pickErr(h.rng, kerr.NotCoordinator, kerr.CoordinatorNotAvailable, kerr.ConcurrentTransactions)}, "EndTxn", 4)
}

// commitError fails offset commits, transactional (processors) and plain
// (publish-im); REQUEST_TIMED_OUT is answered after the commit applied,
// ILLEGAL_GENERATION as after a rebalance the member missed.
func (h *chaosHarness) commitError() bool {
	return h.counted("offset-commit-error", kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit, kmsg.OffsetCommit},
		Err: pickErr(h.rng, kerr.NotCoordinator, kerr.CoordinatorLoadInProgress, kerr.RequestTimedOut, kerr.IllegalGeneration)}, "offset commit", 4)
}

// endTxnDelay holds the next EndTxn at the broker (before it applies) for
// up to the session timeout plus 3s: the client's other requests on that
// connection wait too, so its group session can expire meanwhile, and its
// partitions move while its commit is still in flight (defect 2's
// interleaving).
func (h *chaosHarness) endTxnDelay() bool {
	d := h.between(time.Second, h.session+3*time.Second)
	a := &armed{}
	h.mu.Lock()
	h.armed = append(h.armed, a)
	h.mu.Unlock()
	h.k.Fake.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		h.k.Fake.DropControl()
		if a.fire(h, "endtxn-delay") { // an EndTxn arriving while the first sleeps passes
			h.k.Fake.SleepControl(func() { time.Sleep(d) })
			h.end("endtxn-delay")
		}
		return nil, nil, false
	})
	h.count("endtxn-delay", "next EndTxn held %s", d.Round(time.Millisecond))
	return true
}

// armed is a fault that waits for its request; heal disarms it.
type armed struct {
	mu    sync.Mutex
	spent bool
}

// fire reports whether the fault acts now (at most once); it begins the
// fault under the lock, so heal's wait sees it.
func (a *armed) fire(h *chaosHarness, kind string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.spent {
		return false
	}
	a.spent = true
	h.begin(kind)
	return true
}

func (a *armed) disarm() {
	a.mu.Lock()
	a.spent = true
	a.mu.Unlock()
}

// restoreStall is defect 1's interleaving: the changelog answers every
// fetch with NOT_LEADER_FOR_PARTITION for 11-16s (kgo retries silently, so
// the fetch is just quiet) and a processor instance is SIGKILLed at once,
// so the other one restores the moved partitions through the stall.
func (h *chaosHarness) restoreStall() bool {
	d := h.between(11*time.Second, 16*time.Second)
	restart := h.between(2*time.Second, 5*time.Second)
	p := h.procs[h.processors[h.rng.IntN(len(h.processors))]]
	if h.busy() || p.running() == nil || !h.processorMaySpare(p, time.Now().Add(d+restart)) {
		return false
	}
	h.settle()
	h.mu.Lock()
	h.micStalls = append(h.micStalls, [2]time.Time{time.Now(), time.Now().Add(d + restart)})
	h.mu.Unlock()
	fh := h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: h.changelog, Err: kerr.NotLeaderForPartition, Count: -1})
	if !h.killNow(p, restart) {
		fh.Remove()
		return false
	}
	h.count("restore-stall", "changelog fetches fail for %s; %s SIGKILLed (restart in %s)", d.Round(time.Millisecond), p.name, restart.Round(time.Millisecond))
	h.after("restore-stall", d, fh.Remove)
	return true
}

// zombieCommit is defect 2's interleaving: the next EndTxn of a mic
// processor instance is held at the broker while that instance is
// SIGSTOPped beyond its session timeout (its partitions move to the other
// instance, which restores and carries on), then the EndTxn is let
// through — the late commit of a zombie — and the instance resumes.
func (h *chaosHarness) zombieCommit() bool {
	d := h.session + h.between(time.Second, 4*time.Second)
	a := &armed{}
	h.mu.Lock()
	h.armed = append(h.armed, a)
	h.mu.Unlock()
	h.k.Fake.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		id := req.(*kmsg.EndTxnRequest).TransactionalID
		if !strings.HasPrefix(id, h.micGroup+"-") {
			return nil, nil, false // another client's: keep waiting
		}
		var p *chaosProc
		for _, q := range h.procs {
			if id == h.micGroup+"-"+q.name {
				p = q
			}
		}
		if p == nil || h.busy() || !h.processorMaySpare(p, time.Now().Add(d)) || !a.fire(h, "zombie-commit") {
			h.k.Fake.DropControl()
			return nil, nil, false
		}
		h.k.Fake.DropControl()
		p.mu.Lock()
		c := p.cur
		if c == nil || p.stopped {
			p.mu.Unlock()
			h.end("zombie-commit")
			return nil, nil, false
		}
		p.stopped = true
		p.mu.Unlock()
		_ = c.cmd.Process.Signal(syscall.SIGSTOP)
		h.outage(1)
		h.logf("zombie-commit: %s stopped with its EndTxn (%s) held for %s", p.name, id, d.Round(time.Millisecond))
		held := time.Now()
		h.k.Fake.SleepControl(func() { time.Sleep(d) })
		h.logf("zombie-commit: %s's EndTxn let through after %s", p.name, time.Since(held).Round(time.Millisecond))
		go func() {
			time.Sleep(time.Second) // the late commit lands first
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
			p.mu.Lock()
			p.stopped = false
			p.mu.Unlock()
			h.outage(-1)
			h.end("zombie-commit")
		}()
		return nil, nil, false
	})
	h.count("zombie-commit", "next mic processor EndTxn held %s while its instance is stopped", d.Round(time.Millisecond))
	return true
}

// micInputStall is defect 3's interleaving: the mic processors' input
// answers every fetch with NOT_LEADER_FOR_PARTITION for 1-5s longer than
// the pending max age while their timers keep ticking; the real publishes and
// downs wait in the partitions meanwhile. The late downs of the scenario
// come chaosLateDown after a due time, longer than this stall, so the
// outcome the oracle predicts is the only one a correct pipeline gives.
func (h *chaosHarness) micInputStall() bool {
	d := chaosPendingMaxAge + h.between(time.Second, 5*time.Second)
	if h.nearMicStall(time.Now().Add(d)) {
		return false
	}
	fh := h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: h.micInput, Err: kerr.NotLeaderForPartition, Count: -1})
	h.mu.Lock()
	h.micStalls = append(h.micStalls, [2]time.Time{time.Now(), time.Now().Add(d)})
	h.mu.Unlock()
	h.count("mic-input-stall", "every fetch of the mic input fails for %s", d.Round(time.Millisecond))
	h.after("mic-input-stall", d, fh.Remove)
	return true
}

// nearMicStall reports whether a stall of the mic processors (an input or
// a restore stall) ending at end would run within 20s of another: chained,
// they could hold a timer close back past a late down.
func (h *chaosHarness) nearMicStall(end time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, st := range h.micStalls {
		if time.Now().Before(st[1].Add(20*time.Second)) && end.After(st[0].Add(-20*time.Second)) {
			return true
		}
	}
	return false
}

// killConnections runs KILL CONNECTION on one or all of the pipeline
// children's MySQL connections (found in information_schema.PROCESSLIST by
// user).
func (h *chaosHarness) killConnections() bool {
	return h.killConnectionsOf(h.childUser, "mysql-kill-connection")
}

// luckyKillConnections is killConnections on the draw service replicas'
// connections: a draw transaction, a claim or a grant loses its
// connection (mid-statement or between statements).
func (h *chaosHarness) luckyKillConnections() bool {
	return h.killConnectionsOf(h.luckyUser, "lucky-mysql-kill-connection")
}

func (h *chaosHarness) killConnectionsOf(user, kind string) bool {
	one, which := h.rng.IntN(3) > 0, h.rng.Float64() // mostly one, sometimes every connection
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := h.db.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ? ORDER BY ID", user)
	if err != nil {
		h.logf("processlist: %v", err)
		return false
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if rows.Scan(&id) == nil {
			ids = append(ids, id)
		}
	}
	rows.Close()
	if len(ids) == 0 {
		return false
	}
	if one {
		ids = ids[int(which*float64(len(ids))):][:1]
	}
	for _, id := range ids {
		_, _ = h.db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
	}
	h.count(kind, "%d connection(s) of %s", len(ids), user)
	h.liftedNow()
	return true
}

// killBinlogDump ends the relay leader's binlog stream on the server (KILL
// of its Binlog Dump thread), as a server restart or a cut network would:
// the leader streams again from the position it last committed to Kafka,
// relaying nothing twice and skipping nothing. Binlog profile only.
func (h *chaosHarness) killBinlogDump() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := testenv.KillBinlogDumps(ctx, h.db)
	if err != nil {
		h.logf("binlog dumps: %v", err)
		return false
	}
	if n == 0 { // no leader streams right now
		return false
	}
	h.count("binlog-dump-kill", "%d binlog stream(s) of the relay", n)
	h.liftedNow()
	return true
}

// holdLocks holds SELECT ... FOR UPDATE row locks on fact rows the sink
// writes for 2-8s (a reporting job, a manual fix in a console).
func (h *chaosHarness) holdLocks() bool {
	lo := 100000 + h.rng.Int64N(200)
	queries := []struct{ what, q string }{
		{"user_mic_lifetime_stats", "SELECT user_id FROM user_mic_lifetime_stats WHERE app_code = ? AND user_id BETWEEN ? AND ? FOR UPDATE"},
		{"user_mic_daily_stats", "SELECT user_id FROM user_mic_daily_stats WHERE app_code = ? AND user_id BETWEEN ? AND ? FOR UPDATE"},
		{"user_mic_sessions", "SELECT user_id FROM user_mic_sessions WHERE app_code = ? AND user_id BETWEEN ? AND ? FOR UPDATE"},
		// every lucky gift's inflow touches the platform pool
		{"lucky_pools", "SELECT scope_id FROM lucky_pools WHERE app_code = ? AND scope_type = 'platform' FOR UPDATE"},
	}
	q := queries[h.rng.IntN(len(queries))]
	args := []any{h.appCode}
	if strings.Count(q.q, "?") == 3 {
		args = append(args, lo, lo+20)
	}
	d := h.between(2*time.Second, 8*time.Second)
	tx, err := h.db.BeginTx(context.Background(), nil)
	if err != nil {
		return false
	}
	rows, err := tx.Query(q.q, args...)
	if err != nil {
		_ = tx.Rollback()
		h.logf("lock %s: %v", q.what, err)
		return false
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	h.count("mysql-row-locks", "%d rows of %s for %s", n, q.what, d.Round(time.Millisecond))
	h.after("mysql-row-locks", d, func() { _ = tx.Rollback() })
	return true
}

func (h *chaosHarness) imTimes() int { return 5 + h.rng.IntN(40) }

// imError makes the next calls fail: HTTP 502, an internal error, the
// app's rate limit or the group's send frequency limit.
func (h *chaosHarness) imError() bool {
	f := imfake.Fault{Times: h.imTimes()}
	switch h.rng.IntN(4) {
	case 0:
		f.HTTPStatus = 502
	case 1:
		f.Code = tencentim.CodeInternal
	case 2:
		f.Code = tencentim.CodeAppRateLimited
	default:
		f.Code = tencentim.CodeSendFrequency
	}
	h.im.Inject(f)
	h.count("im-error", "next %d calls: http %d code %d", f.Times, f.HTTPStatus, f.Code)
	h.liftedNow()
	return true
}

// imSlow delays the next calls by up to 4s (beyond publish_timeout).
func (h *chaosHarness) imSlow() bool {
	f := imfake.Fault{Times: h.imTimes(), Delay: h.between(300*time.Millisecond, 4*time.Second)}
	h.im.Inject(f)
	h.count("im-slow", "next %d calls answer after %s", f.Times, f.Delay.Round(time.Millisecond))
	h.liftedNow()
	return true
}

// imFreqCtrl answers the next calls OK with MsgDropReason MsgFreqCtrl: the
// message was dropped and must be sent again.
func (h *chaosHarness) imFreqCtrl() bool {
	f := imfake.Fault{Times: h.imTimes(), FreqCtrl: true}
	h.im.Inject(f)
	h.count("im-msgfreqctrl", "next %d calls dropped with MsgFreqCtrl", f.Times)
	h.liftedNow()
	return true
}

// imAnswerLost accepts the next calls but answers 502: the retry must be
// deduplicated (Random from event_id), never shown twice.
func (h *chaosHarness) imAnswerLost() bool {
	f := imfake.Fault{Times: h.imTimes(), HTTPStatus: 502, AfterAccept: true}
	h.im.Inject(f)
	h.count("im-answer-lost", "next %d calls accepted, answered 502", f.Times)
	h.liftedNow()
	return true
}

// heal ends every fault: waits for the timed ones (stopped children
// resume, killed ones restart, locks are released), removes what is left
// of the counted ones, and returns when the last one ended.
func (h *chaosHarness) heal() time.Time {
	h.mu.Lock()
	for _, a := range h.armed {
		a.disarm()
	}
	h.mu.Unlock()
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	for waited := time.Duration(0); ; waited += 10 * time.Second {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			h.mu.Lock()
			h.logf("still in effect after the schedule: %v", h.active)
			h.mu.Unlock()
			if waited < 2*time.Minute {
				continue
			}
			h.t.Errorf("chaos: faults still in effect 2 minutes after the schedule ended")
		}
		break
	}
	h.mu.Lock()
	for _, fh := range h.kHandles {
		fh.Remove()
	}
	h.mu.Unlock()
	h.im.ClearFaults()
	_ = h.wallet.SetFaults(walletfake.Faults{})
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lifted
}

// table is the run's summary: faults by kind, then rows of figures.
func (h *chaosHarness) table(rows [][2]string) string {
	var b strings.Builder
	h.mu.Lock()
	kinds := make([]string, 0, len(h.faults))
	total := 0
	for k, n := range h.faults {
		kinds = append(kinds, k)
		total += n
	}
	sort.Strings(kinds)
	fmt.Fprintf(&b, "\n  %-34s %s\n", "fault injected", "count")
	for _, k := range kinds {
		fmt.Fprintf(&b, "  %-34s %d\n", k, h.faults[k])
	}
	fmt.Fprintf(&b, "  %-34s %d (%d more skipped: target down)\n", "total", total, h.skipped)
	h.mu.Unlock()
	for _, r := range rows {
		fmt.Fprintf(&b, "  %-34s %s\n", r[0], r[1])
	}
	return b.String()
}

// stopAll SIGTERMs every child and waits for it; it reports children that
// fail to stop cleanly.
// A child still running this long after SIGTERM gets SIGQUIT: the Go
// runtime writes every goroutine's stack to its log (shutdown.timeout is
// 10s, after the draw services' 5s shutdown.drain_delay; the app itself
// gives up then).
func (h *chaosHarness) stopAll(stackAfter time.Duration) {
	cs := h.last()
	for i, c := range cs {
		if c != nil {
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
			// A child restarted a moment ago may not handle SIGTERM yet.
			if !c.awaitSignals(stackAfter) {
				h.t.Errorf("%s did not start handling SIGTERM within %s; log tail:\n%s", h.procs[i].name, stackAfter, c.tail(20))
			}
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	dumpAt := time.After(stackAfter)
	for i, c := range cs {
		if c == nil {
			continue
		}
		select {
		case <-c.done:
		case <-dumpAt:
			_ = c.cmd.Process.Signal(syscall.SIGQUIT)
			h.t.Errorf("%s still ran %s after SIGTERM: goroutine stacks in %s", h.procs[i].name, stackAfter, c.log)
			<-c.done
		}
		if c.err != nil {
			h.t.Errorf("%s on SIGTERM: %v; log tail:\n%s", h.procs[i].name, c.err, c.tail(20))
		}
	}
}

// killAll SIGKILLs whatever still runs (test cleanup).
func (h *chaosHarness) killAll() {
	for _, c := range h.last() {
		if c != nil {
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
}

// last ends the run's restarts and returns each component's current child
// (nil for none), marked as stopped on purpose.
func (h *chaosHarness) last() []*chaosChild {
	h.mu.Lock()
	h.stopping = true
	h.mu.Unlock()
	cs := make([]*chaosChild, len(h.procs))
	for i, p := range h.procs {
		p.mu.Lock()
		p.markStopping()
		cs[i] = p.cur
		p.mu.Unlock()
	}
	return cs
}

// markStopping marks the current child as stopped on purpose (p.mu held).
func (p *chaosProc) markStopping() {
	if p.cur != nil {
		p.cur.killed = true
	}
}

// tails is every component's latest log tail and its self-exits.
func (h *chaosHarness) tails() string {
	var b strings.Builder
	for _, p := range h.procs {
		p.mu.Lock()
		fmt.Fprintf(&b, "---- %s: %d incarnations, %d exited by themselves\n", p.name, p.n, p.selfExits)
		for _, e := range p.exitTails {
			b.WriteString(e + "\n")
		}
		if p.n > 0 {
			fmt.Fprintf(&b, "latest log (%s.%d.log):\n", p.name, p.n)
			b.WriteString((&chaosChild{log: fmt.Sprintf("%s/%s.%d.log", h.dir, p.name, p.n)}).tail(25) + "\n")
		}
		p.mu.Unlock()
	}
	return b.String()
}

// luckyKill SIGKILLs a draw service replica and restarts it 0.2-3s later:
// the draws it had in flight are answered by the other replica (the same
// command_id: stored or drawn once), its synchronous credits and outbox
// claims are taken over once outbox_lock_ttl expires.
func (h *chaosHarness) luckyKill() bool {
	restart := h.between(200*time.Millisecond, 3*time.Second)
	p := h.pickOf(h.lucky)
	if p == nil || !h.killNow(p, restart) {
		return false
	}
	h.count("lucky-sigkill", "%s (restart in %s)", p.name, restart.Round(time.Millisecond))
	return true
}

// luckyZombie SIGSTOPs a draw service replica for longer than its outbox
// lease, so the other replica takes its claimed rewards and events over
// while it still holds them (and maybe a draw transaction's pool locks),
// then resumes it: its late grants and produces must change nothing.
func (h *chaosHarness) luckyZombie() bool {
	d := h.luckyLockTTL + h.between(500*time.Millisecond, 3*time.Second)
	p := h.pickOf(h.lucky)
	if p == nil {
		return false
	}
	return h.stopFor(p, d, "lucky-zombie")
}

// walletFaults makes the fake wallet fail (Unavailable, nothing
// credited), answer slowly (beyond lucky.wallet_credit_timeout at times),
// lose answers (credited, then Unavailable) or all of these, for 3-15s,
// then heals it. One at a time.
func (h *chaosHarness) walletFaults() bool {
	d := h.between(3*time.Second, 15*time.Second)
	rate := 0.3 + 0.7*h.rng.Float64()
	var f walletfake.Faults
	var what string
	switch h.rng.IntN(4) {
	case 0:
		f.ErrorRate, what = rate, "failing"
	case 1:
		f.Latency, f.Jitter, what = h.between(200*time.Millisecond, time.Second), 500*time.Millisecond, "slow"
	case 2:
		f.LostRate, what = rate, "losing answers"
	default:
		f = walletfake.Faults{ErrorRate: rate / 3, TimeoutRate: rate / 3, LostRate: rate / 3, Latency: 100 * time.Millisecond, Jitter: 300 * time.Millisecond}
		what = "failing, hanging and losing answers"
	}
	h.mu.Lock()
	busy := h.active["wallet-faults"] > 0
	h.mu.Unlock()
	if busy {
		return false
	}
	if err := h.wallet.SetFaults(f); err != nil {
		h.t.Errorf("chaos: wallet faults %+v: %v", f, err)
		return false
	}
	h.count("wallet-faults", "wallet %s for %s (%+v)", what, d.Round(time.Millisecond), f)
	h.after("wallet-faults", d, func() { _ = h.wallet.SetFaults(walletfake.Faults{}) })
	return true
}

// luckyPoolLock holds the platform pool row (every draw locks it) FOR
// UPDATE for 4.5-8s, longer than room-service's two attempts: the gifts of
// that moment are written before their draw commits, the sink may claim
// their inflow first (the draw then adds none), and their draws are
// retried in the background.
func (h *chaosHarness) luckyPoolLock() bool {
	d := h.between(4500*time.Millisecond, 8*time.Second)
	tx, err := h.db.BeginTx(context.Background(), nil)
	if err != nil {
		return false
	}
	var id string
	if err := tx.QueryRow(`SELECT scope_id FROM lucky_pools WHERE app_code = ? AND scope_type = 'platform' AND scope_id = 'global' FOR UPDATE`,
		h.appCode).Scan(&id); err != nil {
		_ = tx.Rollback()
		h.logf("lock the platform pool: %v", err)
		return false
	}
	h.count("lucky-pool-lock", "the platform pool locked for %s", d.Round(time.Millisecond))
	h.after("lucky-pool-lock", d, func() { _ = tx.Rollback() })
	return true
}
