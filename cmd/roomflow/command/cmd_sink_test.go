package command

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/userv1"
	"github.com/hyapp/roomflow/services/statsapi"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

func sinkFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func sinkGetStats(addr, path string) (statsapi.Stats, int, error) {
	var st statsapi.Stats
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return st, 0, err
	}
	defer resp.Body.Close()
	return st, resp.StatusCode, json.NewDecoder(resp.Body).Decode(&st)
}

// TestSinkCommandServesAPI runs `roomflow sink` with api.addr set: the
// ledger is applied and the API on api.addr answers from it; then
// `roomflow api` alone answers the same. `api` is a plain command, not a
// component, so `roomflow run` starts the API once (through the sink).
func TestSinkCommandServesAPI(t *testing.T) {
	for _, s := range components() {
		if s.Name == "api" {
			t.Fatal("api must not be a registered component (roomflow run would serve it twice)")
		}
	}
	k := testenv.NewKafka(t, testenv.Partitions(2))
	m := testenv.NewMySQL(t)
	apiAddr, appAddr, grpcAddr := sinkFreeAddr(t), sinkFreeAddr(t), sinkFreeAddr(t)
	var b strings.Builder
	b.WriteString("log:\n  level: error\nmetrics:\n  addr: \"\"\napp_code: hyapp\n")
	fmt.Fprintf(&b, "api:\n  addr: %q\n  app_addr: %q\n  grpc_addr: %q\n", apiAddr, appAddr, grpcAddr)
	b.WriteString("mysql:\n  dsn: \"" + m.DSN + "\"\n")
	b.WriteString(k.ConfigYAML(2))
	b.WriteString("sink:\n  group: " + testenv.UniqueName(t) + "\n")
	p := testenv.WriteConfig(t, b.String())

	ledger := sinktest.NewLedgerGen(5, "hyapp", 10).Next(500)
	o := sinktest.NewOracle()
	o.AddLedger(ledger...)
	if err := sinktest.Produce(context.Background(), k.Client(t), sinktest.LedgerRecords(k.Config.Topics.MicLedger, ledger)); err != nil {
		t.Fatal(err)
	}
	user := ledger[0].UserId
	want := o.Lifetime[fmt.Sprintf("hyapp|%d", user)]
	if want == nil {
		t.Fatalf("user %d has no lifetime row in the oracle", user)
	}
	path := fmt.Sprintf("/api/v1/users/%d/mic-stats?range=lifetime", user)

	stop, out := testenv.StartCommand(t, NewRoot, p, "sink", "--owner-id", "cmd-test")
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, code, err := sinkGetStats(apiAddr, path)
		if err == nil && code == http.StatusOK && st.SeatOccupiedMs == want[0] && st.SessionCount == want[2] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sink's API never answered the applied lifetime %v: %+v %d %v\n%s", *want, st, code, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatalf("sink: %v\n%s", err, out)
	}
	if err := o.Check(context.Background(), m.DB); err != nil {
		t.Fatal(err)
	}

	stop, out = testenv.StartCommand(t, NewRoot, p, "api")
	deadline = time.Now().Add(30 * time.Second)
	for {
		st, code, err := sinkGetStats(apiAddr, path)
		if err == nil && code == http.StatusOK {
			if st.SeatOccupiedMs != want[0] || st.MicOnlineMs != want[1] || st.SessionCount != want[2] || st.FirstMicAtMs != want[3] || st.LastMicAtMs != want[4] {
				t.Fatalf("roomflow api: %+v, want %v", st, *want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("roomflow api never answered: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, code, _ := sinkGetStats(apiAddr, "/api/v1/users/1/mic-stats?from_ms=9&to_ms=3"); code != http.StatusBadRequest {
		t.Fatalf("bad range: %d, want 400", code)
	}
	// The gateway's route on api.app_addr, and the RPC on api.grpc_addr.
	req, _ := http.NewRequest(http.MethodGet, "http://"+appAddr+"/api/v1/users/me/mic-stats?range=lifetime", nil)
	req.Header.Set("X-User-Id", fmt.Sprint(user))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var me statsapi.Stats
	err = json.NewDecoder(resp.Body).Decode(&me)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || me.SeatOccupiedMs != want[0] || me.SessionCount != want[2] {
		t.Fatalf("app route: %d %+v %v, want %v", resp.StatusCode, me, err, *want)
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := userv1.NewUserServiceClient(conn).GetUserMicLifetimeStats(ctx, &userv1.GetUserMicLifetimeStatsRequest{UserId: user})
	if err != nil || got.GetStats().GetMicOnlineMs() != want[1] || got.GetStats().GetAppCode() != "hyapp" {
		t.Fatalf("gRPC: %v %v, want %v", got, err, *want)
	}
	if err := stop(); err != nil {
		t.Fatalf("api: %v\n%s", err, out)
	}
}
