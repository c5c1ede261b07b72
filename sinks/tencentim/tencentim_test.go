package tencentim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/roomv1"
	"github.com/hyapp/roomflow/sinks/tencentim"
	"github.com/hyapp/roomflow/sinks/tencentim/imfake"
)

const (
	vecKey   = "5bd2850fff3ecb11d7c805251c51ee463a25727bddc2385f3fa8bfee1bb93b5e"
	vecApp   = 1400000000
	vecIdent = "xiaojun"
)

func TestUserSigTestVector(t *testing.T) {
	got := tencentim.SigHMAC(vecKey, vecIdent, vecApp, 1700000000, 15552000)
	if want := "LvA7d/Iw7gSsnskvVzBDPOCCDbuNCw4GHwTC0bip+B4="; got != want {
		t.Fatalf("TLS.sig = %s, want %s", got, want)
	}
	sig, err := tencentim.GenUserSig(vecApp, vecKey, vecIdent, time.Unix(1700000000, 0), 15552000*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(sig, "+/=") {
		t.Fatalf("sig %q is not URL-mapped", sig)
	}
	info, err := tencentim.VerifyUserSig(sig, vecApp, vecKey, vecIdent, time.Unix(1700000000+15552000, 0))
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if info.Time.Unix() != 1700000000 || info.Expire != 15552000*time.Second {
		t.Fatalf("info %+v", info)
	}
	cases := []struct {
		name  string
		sig   string
		app   int64
		key   string
		ident string
		now   int64
		want  error
	}{
		{"expired", sig, vecApp, vecKey, vecIdent, 1700000000 + 15552000 + 1, tencentim.ErrSigExpired},
		{"wrong app", sig, vecApp + 1, vecKey, vecIdent, 1700000001, tencentim.ErrSigAppIDMismatch},
		{"wrong identifier", sig, vecApp, vecKey, "admin", 1700000001, tencentim.ErrSigIdentifierMismatch},
		{"wrong key", sig, vecApp, vecKey + "0", vecIdent, 1700000001, tencentim.ErrSigBadHMAC},
		{"garbage", "not*a*sig", vecApp, vecKey, vecIdent, 1700000001, tencentim.ErrSigMalformed},
	}
	for _, c := range cases {
		if _, err := tencentim.VerifyUserSig(c.sig, c.app, c.key, c.ident, time.Unix(c.now, 0)); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}

func TestClassify(t *testing.T) {
	table := map[tencentim.Class][]int{
		tencentim.Retryable: {10002, 10006, 10023, 60007, 60011, 60018, 60019, 60008, 70169, 70202, 70500,
			20004, 20005, 90992, 90994, 90995, 91000, 70050, 12345},
		tencentim.RegenerateSig: {70001, 70052},
		tencentim.Permanent: {10003, 10004, 10007, 10010, 10015, 10016, 10017, 10026, 80001, 80002, 93000,
			60002, 60003, 60004, 60005, 60006, 60009, 60010, 70403, 60012, 60016, 60017, 60020, 60021,
			70002, 70003, 70005, 70009, 70013, 70014, 70016, 70020, 70107},
	}
	for want, codes := range table {
		for _, c := range codes {
			if got := tencentim.Classify(c); got != want {
				t.Errorf("Classify(%d) = %s, want %s", c, got, want)
			}
		}
	}
	errs := []struct {
		err   error
		class tencentim.Class
		code  string
	}{
		{&tencentim.HTTPError{Status: 502}, tencentim.Retryable, "http"},
		{&tencentim.DroppedError{Reason: "MsgFreqCtrl"}, tencentim.Retryable, "MsgFreqCtrl"},
		{&tencentim.TooLargeError{Size: 20000, Limit: 12288}, tencentim.Permanent, "80002"},
		{&tencentim.APIError{Code: 10010, Class: tencentim.Permanent}, tencentim.Permanent, "10010"},
		{&tencentim.TransportError{Op: "Post", Err: errors.New("connection refused")}, tencentim.Retryable, "transport"},
		{context.DeadlineExceeded, tencentim.Retryable, "timeout"},
		{&tencentim.PayloadError{EventType: "RoomGiftSent", Err: errors.New("x")}, tencentim.Permanent, "payload"},
	}
	for _, e := range errs {
		if c, code := tencentim.Classification(e.err); c != e.class || code != e.code {
			t.Errorf("Classification(%v) = %s/%s, want %s/%s", e.err, c, code, e.class, e.code)
		}
	}
}

// build is BuildMessage on the wire bytes of env, as the publisher reads them.
func build(env *roomv1.EventEnvelope, groupPrefix string) (*tencentim.Message, error) {
	b, err := proto.Marshal(env)
	if err != nil {
		return nil, err
	}
	var v envelope.View
	if err := v.Parse(b); err != nil {
		return nil, err
	}
	return tencentim.BuildMessage(&v, groupPrefix)
}

func giftEnvelope(eventID, room string) *roomv1.EventEnvelope {
	p, _ := proto.Marshal(&roomv1.RoomGiftSent{SenderUserId: 7, TargetUserId: 8, GiftId: "rose", GiftCount: 3, CoinSpent: 30})
	return &roomv1.EventEnvelope{EventId: eventID, EventType: "RoomGiftSent", AppCode: "hyapp", RoomId: room,
		RoomVersion: 42, OccurredAtMs: 1700000000123, Payload: p}
}

func TestBuildMessage(t *testing.T) {
	env := giftEnvelope("evt-1", "r1")
	m1, err := build(env, "room-")
	if err != nil {
		t.Fatal(err)
	}
	m2, _ := build(proto.Clone(env).(*roomv1.EventEnvelope), "room-")
	if !bytes.Equal(m1.Body, m2.Body) {
		t.Fatal("body differs between builds of the same event")
	}
	if m1.Random != tencentim.RandomFor("evt-1") || m1.Random == tencentim.RandomFor("evt-2") {
		t.Fatal("Random not derived from event_id")
	}
	var req struct {
		GroupId     string
		Random      uint32
		MsgPriority string
		MsgBody     []struct {
			MsgType    string
			MsgContent struct{ Data, Desc, Ext string }
		}
	}
	if err := json.Unmarshal(m1.Body, &req); err != nil {
		t.Fatal(err)
	}
	if req.GroupId != "room-r1" || req.MsgPriority != "High" || len(req.MsgBody) != 1 || req.MsgBody[0].MsgType != "TIMCustomElem" ||
		req.MsgBody[0].MsgContent.Desc != "RoomGiftSent" || req.MsgBody[0].MsgContent.Ext != "evt-1" {
		t.Fatalf("request %+v", req)
	}
	var data struct {
		EventID     string `json:"event_id"`
		EventType   string `json:"event_type"`
		RoomVersion int64  `json:"room_version"`
		Event       struct {
			GiftID    string `json:"gift_id"`
			GiftCount int    `json:"gift_count"`
		} `json:"event"`
	}
	if err := json.Unmarshal([]byte(req.MsgBody[0].MsgContent.Data), &data); err != nil {
		t.Fatal(err)
	}
	if data.EventID != "evt-1" || data.EventType != "RoomGiftSent" || data.RoomVersion != 42 || data.Event.GiftID != "rose" || data.Event.GiftCount != 3 {
		t.Fatalf("data %+v", data)
	}
	join, _ := proto.Marshal(&roomv1.RoomUserJoined{UserId: 1})
	mj, _ := build(&roomv1.EventEnvelope{EventId: "j", EventType: "RoomUserJoined", RoomId: "r", Payload: join}, "")
	if mj.Priority != "Normal" {
		t.Fatalf("join priority %s", mj.Priority)
	}
	if _, err := build(&roomv1.EventEnvelope{EventId: "b", EventType: "RoomGiftSent", RoomId: "r", Payload: []byte{0xff, 0xff}}, ""); !errors.As(err, new(*tencentim.PayloadError)) {
		t.Fatalf("bad payload: %v", err)
	}
	for _, typ := range []string{"RoomCreated", "RoomHeatChanged", "RoomRankChanged"} {
		if !tencentim.IsNoOp(typ) {
			t.Errorf("%s should be a no-op", typ)
		}
	}
	if tencentim.IsNoOp("RoomGiftSent") {
		t.Error("RoomGiftSent must be published")
	}
}

func TestPacerWindow(t *testing.T) {
	p := tencentim.NewPacer(5, 2, time.Second)
	clock := time.Unix(1000, 0)
	p.SetClock(func() time.Time { return clock })
	var grants []time.Time
	perGroup := map[string][]time.Time{}
	for i := 0; len(grants) < 40; i++ {
		g := []string{"a", "b", "c", "d"}[i%4]
		at, ok := p.Reserve(g)
		if at.After(clock) {
			clock = at
		}
		if !ok {
			continue
		}
		grants = append(grants, at)
		perGroup[g] = append(perGroup[g], at)
	}
	check := func(name string, ts []time.Time, limit int) {
		for i := range ts {
			n := 0
			for j := range ts {
				if !ts[j].Before(ts[i]) && ts[j].Before(ts[i].Add(time.Second)) {
					n++
				}
			}
			if n > limit {
				t.Fatalf("%s: %d grants in the window from %s", name, n, ts[i])
			}
		}
	}
	check("app", grants, 5)
	for g, ts := range perGroup {
		check(g, ts, 2)
	}
	// 40 grants at 5 per window: about 7 windows, not more (no wasted slots).
	if el := grants[len(grants)-1].Sub(grants[0]); el > 8*time.Second {
		t.Fatalf("40 grants took %s", el)
	}
}

// SetAppRate: a lower rate holds back at once (the grants of the last
// window count), a higher one only after a window, 0 grants nothing, and a
// rate under one call per second spaces single calls out.
func TestPacerSetAppRate(t *testing.T) {
	p := tencentim.NewPacer(10, 1000, time.Second)
	clock := time.Unix(1000, 0)
	p.SetClock(func() time.Time { return clock })
	var grants []time.Time
	// grantUntil takes every grant before end, moving the clock as a
	// waiting caller would, and returns how many start in [start, end)
	// (a grant booked at or after end counts for the next call).
	grantUntil := func(end time.Time) int {
		start := clock
		for i := 0; clock.Before(end); i++ {
			at, ok := p.Reserve(fmt.Sprintf("g%d", i))
			if at.After(clock) {
				clock = at
			}
			if ok {
				grants = append(grants, at)
			}
		}
		n := 0
		for _, g := range grants {
			if !g.Before(start) && g.Before(end) {
				n++
			}
		}
		return n
	}
	t0 := clock
	if n := grantUntil(t0.Add(500 * time.Millisecond)); n != 10 {
		t.Fatalf("%d grants at rate 10 in the first half second, want 10", n)
	}
	p.SetAppRate(4) // the 10 grants of this window still count
	if n := grantUntil(t0.Add(time.Second)); n != 0 {
		t.Fatalf("%d grants after lowering to 4 within the window of 10, want 0", n)
	}
	if n := grantUntil(t0.Add(2 * time.Second)); n != 4 {
		t.Fatalf("%d grants in the next window at rate 4, want 4", n)
	}
	p.SetAppRate(8) // takes effect one window later
	if got := p.AppRate(); got != 4 {
		t.Fatalf("rate right after raising: %v, want still 4", got)
	}
	if n := grantUntil(t0.Add(3 * time.Second)); n != 4 {
		t.Fatalf("%d grants in the window after raising, want still 4", n)
	}
	if n := grantUntil(t0.Add(4 * time.Second)); n != 8 {
		t.Fatalf("%d grants a window after raising, want 8", n)
	}
	clock = t0.Add(5 * time.Second)
	p.SetAppRate(0)
	if _, ok := p.Reserve("zero"); ok {
		t.Fatal("a grant at rate 0")
	}
	p.SetAppRate(0.5) // raised: from 6s on, one call per 2s
	before := len(grants)
	if n := grantUntil(t0.Add(13 * time.Second)); n < 3 || n > 4 {
		t.Fatalf("%d grants from 5s to 13s at rate 0.5 (raised after a window), want 3 or 4", n)
	}
	for i := before + 1; i < len(grants); i++ {
		if d := grants[i].Sub(grants[i-1]); d < 2*time.Second {
			t.Fatalf("grants %s apart at rate 0.5", d)
		}
	}
	if grants[before].Before(t0.Add(6 * time.Second)) {
		t.Fatalf("first grant at rate 0.5 at %s, before the raise took effect", grants[before].Sub(t0))
	}
	// Never more than the rate in force in any window.
	for i := range grants {
		n := 0
		for _, g := range grants[i:] {
			if g.Before(grants[i].Add(time.Second)) {
				n++
			}
		}
		if n > 10 || (grants[i].After(t0.Add(time.Second)) && n > 8) {
			t.Fatalf("%d grants in the window from %s", n, grants[i].Sub(t0))
		}
	}
}

func imCfg(endpoint string) tencentim.Config {
	return tencentim.Config{Endpoint: endpoint, SDKAppID: vecApp, SecretKey: vecKey, AdminIdentifier: "admin"}
}

func fakeServer(t *testing.T) (*imfake.Server, string) {
	f := imfake.New(imfake.Config{SDKAppID: vecApp, AdminIdentifier: "admin", SecretKey: vecKey})
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func TestClientAgainstFake(t *testing.T) {
	f, url := fakeServer(t)
	reg := prometheus.NewRegistry()
	cfg := imCfg(url)
	cfg.Registerer = reg
	c, err := tencentim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, _ := build(giftEnvelope("e1", "r1"), "room-")
	if _, err := c.Send(ctx, m); err != nil {
		t.Fatalf("send: %v", err)
	}
	// Resend: absorbed by Random dedup.
	if _, err := c.Send(ctx, m); err != nil {
		t.Fatalf("resend: %v", err)
	}
	if st := f.Stats(); st.Accepted != 1 || st.Duplicates != 1 {
		t.Fatalf("stats %+v", st)
	}

	// 70001 -> regenerate at once and succeed in the same Send.
	f.Inject(imfake.Fault{Code: 70001, Times: 1})
	m2, _ := build(giftEnvelope("e2", "r1"), "room-")
	if _, err := c.Send(ctx, m2); err != nil {
		t.Fatalf("send after 70001: %v", err)
	}
	// Revoked sigs (70052) are detected by the fake itself.
	f.InvalidateSigs()
	time.Sleep(1100 * time.Millisecond) // the fresh sig must carry a later TLS.time
	m3, _ := build(giftEnvelope("e3", "r1"), "room-")
	if _, err := c.Send(ctx, m3); err != nil {
		t.Fatalf("send after invalidation: %v", err)
	}
	if v := testenv.Total(c.Metrics().SigRenewals("invalidated")); v != 1 {
		t.Fatalf("invalidated renewals %v", v)
	}
	if v := testenv.Total(c.Metrics().SigRenewals("expired")); v != 1 {
		t.Fatalf("expired renewals %v", v)
	}

	cases := []struct {
		fault imfake.Fault
		class tencentim.Class
		code  string
	}{
		{imfake.Fault{HTTPStatus: 502, Times: 1}, tencentim.Retryable, "http"},
		{imfake.Fault{FreqCtrl: true, Times: 1}, tencentim.Retryable, "MsgFreqCtrl"},
		{imfake.Fault{Code: 10010, Times: 1}, tencentim.Permanent, "10010"},
		{imfake.Fault{Code: 70050, Times: 1}, tencentim.Retryable, "70050"},
		{imfake.Fault{Code: 70001, Times: 2}, tencentim.RegenerateSig, "70001"},
	}
	for i, cs := range cases {
		f.Inject(cs.fault)
		m, _ := build(giftEnvelope("f"+string(rune('a'+i)), "r2"), "room-")
		cc, _ := tencentim.New(imCfg(url)) // 70050 pauses its client for 60 s
		_, err := cc.Send(ctx, m)
		if cl, code := tencentim.Classification(err); cl != cs.class || code != cs.code {
			t.Errorf("fault %+v: %v -> %s/%s", cs.fault, err, cl, code)
		}
	}
	// Slow answer: bounded by the caller's context.
	f.Inject(imfake.Fault{Delay: 2 * time.Second, Times: 1})
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	m4, _ := build(giftEnvelope("slow", "r3"), "room-")
	start := time.Now()
	_, err = c.Send(tctx, m4)
	if cl, code := tencentim.Classification(err); cl != tencentim.Retryable || code != "timeout" && code != "transport" || time.Since(start) > time.Second {
		t.Fatalf("slow: %v %s/%s after %s", err, cl, code, time.Since(start))
	}

	// Oversized: permanent 80002 without a call.
	big := giftEnvelope("big", "r1")
	big.EventType = "RoomUserLeft"
	big.Payload, _ = proto.Marshal(&roomv1.RoomUserLeft{UserId: 1, Reason: strings.Repeat("x", 13000)})
	mb, _ := build(big, "room-")
	before := f.Stats().Requests
	_, err = c.Send(ctx, mb)
	if cl, code := tencentim.Classification(err); cl != tencentim.Permanent || code != "80002" || f.Stats().Requests != before {
		t.Fatalf("oversized: %v %s/%s", err, cl, code)
	}
}

// The fake itself refuses what Tencent refuses.
func TestFakeRejectsBadRequests(t *testing.T) {
	_, url := fakeServer(t)
	bad := imCfg(url)
	bad.SecretKey = "wrong"
	c, _ := tencentim.New(bad)
	m, _ := build(giftEnvelope("x", "r"), "")
	_, err := c.Send(context.Background(), m)
	if _, code := tencentim.Classification(err); code != "70009" {
		t.Fatalf("wrong key: %v", err)
	}
	bad = imCfg(url)
	bad.SDKAppID = 1400000001
	c, _ = tencentim.New(bad)
	_, err = c.Send(context.Background(), m)
	if _, code := tencentim.Classification(err); code != "60006" {
		t.Fatalf("wrong app: %v", err)
	}
	// Past the client's size check (Deliver), as a max_message_bytes above
	// Tencent's 12 KB would let it: the fake refuses it as Tencent does.
	c, _ = tencentim.New(imCfg(url))
	big := giftEnvelope("big", "r1")
	big.EventType = "RoomUserLeft"
	big.Payload, _ = proto.Marshal(&roomv1.RoomUserLeft{UserId: 1, Reason: strings.Repeat("x", 13000)})
	mb, _ := build(big, "")
	if err := c.CheckSize(mb); err == nil {
		t.Fatalf("a %d-byte message passed the client's size check", mb.Size)
	}
	_, err = c.Deliver(context.Background(), mb)
	if _, code := tencentim.Classification(err); code != "80002" {
		t.Fatalf("fake size limit: %v", err)
	}
}

// The fake drops over 40/s per group and refuses over 200/s per app when a
// client does not pace.
func TestFakeRateLimits(t *testing.T) {
	frozen := time.Now() // one wall-clock second for every call
	f := imfake.New(imfake.Config{SDKAppID: vecApp, AdminIdentifier: "admin", SecretKey: vecKey, Now: func() time.Time { return frozen }})
	srv := httptest.NewServer(f)
	defer srv.Close()
	cfg := imCfg(srv.URL)
	cfg.MaxCallsPerSecond, cfg.MaxMessagesPerGroupPerSecond = 100000, 100000 // an unpaced client
	c, _ := tencentim.New(cfg)
	var wg sync.WaitGroup
	results := make(chan error, 300)
	for i := 0; i < 300; i++ {
		room := "hot"
		if i%5 != 0 {
			room = fmt.Sprintf("r%d", i)
		}
		m, _ := build(giftEnvelope(fmt.Sprintf("rl-%d", i), room), "")
		wg.Go(func() { _, err := c.Send(context.Background(), m); results <- err })
	}
	wg.Wait()
	close(results)
	codes := map[string]int{}
	for err := range results {
		_, code := tencentim.Classification(err)
		codes[code]++
	}
	st := f.Stats()
	hot := 0
	for _, a := range f.Accepted() {
		if a.GroupID == "hot" {
			hot++
		}
	}
	if st.Rejected != 100 || codes["60007"] != 100 || st.Accepted+st.Dropped != 200 || codes["MsgFreqCtrl"] != st.Dropped || hot > 40 {
		t.Fatalf("stats %+v, codes %v, hot accepted %d", st, codes, hot)
	}
}

// A connection error never prints the URL (it carries the usersig) nor the key.
func TestTransportErrorHasNoSecrets(t *testing.T) {
	srv := httptest.NewServer(nil)
	url := srv.URL
	srv.Close() // connection refused from now on
	var logs bytes.Buffer
	cfg := imCfg(url)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, _ := tencentim.New(cfg)
	m, _ := build(giftEnvelope("x", "r"), "")
	_, err := c.Send(context.Background(), m)
	if err == nil {
		t.Fatal("expected a connection error")
	}
	sig, _ := tencentim.GenUserSig(vecApp, vecKey, "admin", time.Now(), time.Hour)
	for _, s := range []string{"usersig=", vecKey, sig[:20], "sdkappid="} {
		if strings.Contains(err.Error(), s) || strings.Contains(logs.String(), s) {
			t.Fatalf("error or log contains %q: %v", s, err)
		}
	}
	if !errors.As(err, new(*tencentim.TransportError)) {
		t.Fatalf("not a TransportError: %T", err)
	}
}

// The cached UserSig is reused, and renewed once three quarters of its
// lifetime have passed, before Tencent would refuse it.
func TestUserSigCacheAndScheduledRenewal(t *testing.T) {
	_, url := fakeServer(t)
	clock := time.Now()
	cfg := imCfg(url)
	cfg.UserSigTTL = time.Hour
	cfg.Now = func() time.Time { return clock }
	c, _ := tencentim.New(cfg)
	send := func(id string) {
		m, _ := build(giftEnvelope(id, "r"), "")
		if _, err := c.Send(context.Background(), m); err != nil {
			t.Fatalf("send %s: %v", id, err)
		}
	}
	send("a")
	send("b")
	clock = clock.Add(40 * time.Minute)
	send("c")
	if v := testenv.Total(c.Metrics().SigRenewals("initial")); v != 1 {
		t.Fatalf("initial %v", v)
	}
	if v := testenv.Total(c.Metrics().SigRenewals("scheduled")); v != 0 {
		t.Fatalf("renewed too early: %v", v)
	}
	clock = clock.Add(6 * time.Minute) // 46 of 60 minutes used
	send("d")
	if v := testenv.Total(c.Metrics().SigRenewals("scheduled")); v != 1 {
		t.Fatalf("scheduled renewals %v", v)
	}
}

// The client logs under its caller's component: a publish-im logger's
// lines carry component=publish-im once, never a second component field.
func TestLogsKeepTheCallersComponent(t *testing.T) {
	_, url := fakeServer(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil)).With("component", "publish-im")
	cfg := imCfg(url)
	cfg.Logger = log
	c, err := tencentim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := build(giftEnvelope("log-1", "r"), "")
	if _, err := c.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) == 0 || !strings.Contains(logs.String(), "usersig generated") {
		t.Fatalf("no usersig log line: %q", logs.String())
	}
	for _, l := range lines {
		if n := strings.Count(l, `"component":`); n != 1 || !strings.Contains(l, `"component":"publish-im"`) {
			t.Errorf("log line has %d component fields, want one publish-im: %s", n, l)
		}
	}
}

// A client with negative rate limits is refused at New (0 is the
// default); it used to be built and then panic (an empty pacer window) on
// its first send.
func TestNewRefusesNonPositiveRateLimits(t *testing.T) {
	_, url := fakeServer(t)
	for _, mut := range []func(*tencentim.Config){
		func(c *tencentim.Config) { c.MaxCallsPerSecond = -1 },
		func(c *tencentim.Config) { c.MaxMessagesPerGroupPerSecond = -1 },
	} {
		cfg := imCfg(url)
		mut(&cfg)
		c, err := tencentim.New(cfg)
		if err == nil {
			m, _ := build(giftEnvelope("rl", "r"), "")
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("New accepted limits %d/%d and Send panicked: %v", cfg.MaxCallsPerSecond, cfg.MaxMessagesPerGroupPerSecond, p)
					}
				}()
				_, _ = c.Send(context.Background(), m)
			}()
			t.Errorf("New accepted limits %d/%d", cfg.MaxCallsPerSecond, cfg.MaxMessagesPerGroupPerSecond)
		}
	}
}

// Rate-limit refusals during one pause log one WARN, not one per refused
// call (an outage of 60007s used to flood the log); the rest are DEBUG
// and every refusal is counted.
func TestRateLimitPauseWarnsOnce(t *testing.T) {
	f, url := fakeServer(t)
	f.Inject(imfake.Fault{Code: 60007})
	logs := &testenv.SyncBuffer{}
	reg := prometheus.NewRegistry()
	cfg := imCfg(url)
	cfg.Registerer = reg
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := tencentim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		m, _ := build(giftEnvelope(fmt.Sprintf("rl-%d", i), fmt.Sprintf("r%d", i)), "")
		wg.Go(func() {
			if _, err := c.Deliver(context.Background(), m); err == nil {
				t.Error("a refused call succeeded")
			}
		})
	}
	wg.Wait()
	pauses := 1 + int(time.Since(start)/time.Second) // each pause lasts 1s
	warns, debugs := 0, 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "asked to slow down") {
			if strings.Contains(l, `"level":"WARN"`) {
				warns++
			} else {
				debugs++
			}
		}
	}
	if warns < 1 || warns > pauses || warns+debugs != n {
		t.Fatalf("%d WARN and %d DEBUG pause lines for %d refusals within %d pause(s)", warns, debugs, n, pauses)
	}
	if v, _ := testenv.Metric(reg, "roomflow_im_publish_total", "code", "60007"); v != n {
		t.Fatalf("refusals counted: %v", v)
	}
}

// Validate names the field of every invalid value and never the secret;
// New fills the defaults of zero fields first, so only the credentials are
// required.
func TestConfigValidateNamesTheField(t *testing.T) {
	valid := func() tencentim.Config {
		return tencentim.Config{Endpoint: "https://im.example", SDKAppID: vecApp, AdminIdentifier: "admin", SecretKey: vecKey,
			UserSigTTL: time.Hour, MaxCallsPerSecond: 200, MaxMessagesPerGroupPerSecond: 40, MaxMessageBytes: 12 << 10}
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	cases := []struct {
		key string
		mut func(*tencentim.Config)
	}{
		{"endpoint", func(c *tencentim.Config) { c.Endpoint = "ftp://x" }},
		{"endpoint", func(c *tencentim.Config) { c.Endpoint = "http://" }},
		{"sdk_app_id", func(c *tencentim.Config) { c.SDKAppID = 0 }},
		{"sdk_app_id", func(c *tencentim.Config) { c.SDKAppID = -1 }},
		{"sdk_app_id", func(c *tencentim.Config) { c.SDKAppID = 1 << 33 }},
		{"secret_key", func(c *tencentim.Config) { c.SecretKey = "" }},
		{"usersig_ttl", func(c *tencentim.Config) { c.UserSigTTL = -1 }},
		{"usersig_ttl", func(c *tencentim.Config) { c.UserSigTTL = time.Minute }},
		{"max_calls_per_second", func(c *tencentim.Config) { c.MaxCallsPerSecond = -1 }},
		{"max_messages_per_group_per_second", func(c *tencentim.Config) { c.MaxMessagesPerGroupPerSecond = -1 }},
		{"max_message_bytes", func(c *tencentim.Config) { c.MaxMessageBytes = -1 }},
		{"max_message_bytes", func(c *tencentim.Config) { c.MaxMessageBytes = tencentim.MaxMessageBytesLimit + 1 }},
		{"pacing_window", func(c *tencentim.Config) { c.PacingWindow = -time.Second }},
	}
	for _, tc := range cases {
		c := valid()
		tc.mut(&c)
		err := c.Validate()
		if !slices.Contains(cfgerr.Keys(err), tc.key) {
			t.Errorf("%s: error does not name the field: %v", tc.key, err)
		}
		if err != nil && strings.Contains(err.Error(), vecKey) {
			t.Errorf("%s: error contains the secret key: %v", tc.key, err)
		}
	}

	// New: the defaults fill every zero but the credentials.
	if _, err := tencentim.New(tencentim.Config{SDKAppID: vecApp, SecretKey: vecKey}); err != nil {
		t.Fatalf("New with credentials only: %v", err)
	}
	_, err := tencentim.New(tencentim.Config{})
	if !slices.Contains(cfgerr.Keys(err), "sdk_app_id") || !slices.Contains(cfgerr.Keys(err), "secret_key") {
		t.Fatalf("New without credentials: %v", err)
	}
	bad := valid()
	bad.Endpoint = "::"
	if _, err := tencentim.New(bad); !slices.Contains(cfgerr.Keys(err), "endpoint") || strings.Contains(err.Error(), vecKey) {
		t.Fatalf("New with a bad endpoint: %v", err)
	}
}

// Tencent's own text in an answer (ErrorInfo, MsgDropReason) is cut at a
// character boundary, so it can be stored in a utf8mb4 column, and a drop
// reason that is no short identifier is counted under the "dropped" code:
// never an invalid or unbounded metric label.
func TestAnswerTextCutAtCharacters(t *testing.T) {
	long := "x" + strings.Repeat("群组不存在", 10)
	for _, c := range []struct {
		body, code string
	}{
		{fmt.Sprintf(`{"ActionStatus":"FAIL","ErrorCode":10010,"ErrorInfo":%q}`, long), "10010"},
		{fmt.Sprintf(`{"ActionStatus":"OK","ErrorCode":0,"MsgSeq":1,"MsgDropReason":%q}`, "xx"+strings.Repeat("频率", 10)), tencentim.PseudoCodeDropped},
		{`{"ActionStatus":"OK","ErrorCode":0,"MsgSeq":1,"MsgDropReason":"MsgFreqCtrl"}`, tencentim.PseudoCodeFreqCtrl},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, c.body) }))
		reg := prometheus.NewRegistry()
		cfg := imCfg(srv.URL)
		cfg.Registerer = reg
		cl, err := tencentim.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := build(giftEnvelope("e1", "r1"), "room-")
		_, err = cl.Deliver(context.Background(), m)
		srv.Close()
		if err == nil || !utf8.ValidString(err.Error()) {
			t.Fatalf("answer %s: error %q, want one of valid UTF-8", c.body, err)
		}
		if _, code := tencentim.Classification(err); code != c.code {
			t.Fatalf("answer %s: code %q, want %q", c.body, code, c.code)
		}
		if v, _ := testenv.Metric(reg, "roomflow_im_publish_total", "code", c.code); v != 1 {
			t.Fatalf("answer %s: roomflow_im_publish_total{code=%q} = %v, want 1", c.body, c.code, v)
		}
	}
}
