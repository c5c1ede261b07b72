// Package imfake is a faithful fake of Tencent Cloud IM's send_group_msg
// REST endpoint for tests, the demo and load tests.
//
// It checks what the real service checks (URL parameters, the TLSSigAPIv2
// UserSig, the JSON shape of an AVChatRoom custom message, the message size
// limit), enforces the per-app call limit (error 60007) and the per-group
// message limit (an OK answer with MsgDropReason "MsgFreqCtrl"), drops a
// repeated Random from the same sender to the same group with the same
// content within the dedup window (answered OK, not stored twice), and
// records what it accepted. Faults (error codes, HTTP 502, slow answers,
// MsgFreqCtrl drops, answers lost after acceptance) are injected on command.
//
// Rate limits are counted per wall-clock second of arrival, like a server
// side counter; the stricter sliding-window maxima are recorded for reports.
package imfake

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hyapp/roomflow/sinks/tencentim"
)

// Config describes the fake app.
type Config struct {
	SDKAppID        int64
	AdminIdentifier string
	SecretKey       string
	// AppCallsPerSecond is the send_group_msg limit per SDKAppID (200).
	AppCallsPerSecond int
	// GroupMessagesPerSecond is the AVChatRoom limit per group (40).
	GroupMessagesPerSecond int
	// MaxMessageBytes bounds the encoded MsgBody (12 KB).
	MaxMessageBytes int
	// DedupWindow is how long a Random is remembered (5 minutes).
	DedupWindow time.Duration
	// Now is the server clock (default time.Now).
	Now func() time.Time
}

// Defaults fills zero fields with Tencent's documented values.
func (c Config) Defaults() Config {
	if c.AppCallsPerSecond == 0 {
		c.AppCallsPerSecond = 200
	}
	if c.GroupMessagesPerSecond == 0 {
		c.GroupMessagesPerSecond = 40
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = 12 * 1024
	}
	if c.DedupWindow == 0 {
		c.DedupWindow = 5 * time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Fault is an injected misbehaviour, applied to matching requests.
type Fault struct {
	// EventID or GroupID restrict the fault (empty: any request).
	EventID string
	GroupID string
	// Times is how many requests it applies to (0: until cleared).
	Times int
	// Delay is slept before answering.
	Delay time.Duration
	// Arrived, when set, is sent the event id of each request the fault
	// applies to as it arrives (before Delay), so a test knows a send is
	// in flight; a full channel is not waited for.
	Arrived chan<- string
	// HTTPStatus answers with this status (e.g. 502) and a text body.
	HTTPStatus int
	// Code answers ActionStatus FAIL with this ErrorCode.
	Code int
	// FreqCtrl answers OK with MsgDropReason "MsgFreqCtrl" without storing.
	FreqCtrl bool
	// AfterAccept processes the request normally (it may be accepted) and
	// then answers per HTTPStatus/Code: the answer is lost, the message
	// is not.
	AfterAccept bool
}

// Accepted is one stored message.
type Accepted struct {
	GroupID   string
	Random    uint32
	Priority  string
	EventID   string // MsgContent.Ext
	EventType string // MsgContent.Desc
	Data      string
	BodySHA   [32]byte
	Seq       uint64
	At        time.Time
}

// Request is one call as the server saw it.
type Request struct {
	EventID string
	GroupID string
	Random  uint32
	BodySHA [32]byte
	// Outcome: accepted, duplicate, dropped, fault, or "error <code>".
	Outcome string
	Code    int
	At      time.Time
}

// Server is the fake. It is an http.Handler.
type Server struct {
	cfg Config

	mu          sync.Mutex
	faults      []*Fault
	accepted    []Accepted
	requests    []Request
	dedup       map[dedupKey]dedupEntry
	groupSeq    map[string]uint64
	appBucket   bucket
	grpBucket   map[string]*bucket
	gone        map[string]bool
	invalidTill int64 // sigs with TLS.time < this are invalidated (70052)
	appWin      []time.Time
	grpWin      map[string][]time.Time
	maxAppWin   int
	maxGrpWin   int
	maxAppSec   int
	maxGrpSec   int
}

type dedupKey struct {
	from, group string
	random      uint32
}

type dedupEntry struct {
	content [32]byte
	at      time.Time
	seq     uint64
}

type bucket struct {
	sec int64
	n   int
}

func (b *bucket) add(sec int64) int {
	if b.sec != sec {
		b.sec, b.n = sec, 0
	}
	b.n++
	return b.n
}

// New returns a fake for cfg (zero fields take Tencent's defaults).
func New(cfg Config) *Server {
	return &Server{cfg: cfg.Defaults(), dedup: map[dedupKey]dedupEntry{}, groupSeq: map[string]uint64{},
		grpBucket: map[string]*bucket{}, gone: map[string]bool{}, grpWin: map[string][]time.Time{}}
}

// Inject adds a fault. Faults apply in the order injected; the first
// matching one wins.
func (s *Server) Inject(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &f)
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// DeleteGroup makes group answer 10010 (group dissolved).
func (s *Server) DeleteGroup(group string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gone[group] = true
}

// InvalidateSigs invalidates every UserSig generated before now (70052),
// as when the admin's sigs are revoked.
func (s *Server) InvalidateSigs() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.invalidTill = s.cfg.Now().Unix() + 1
}

// Accepted returns a copy of every stored message in arrival order.
func (s *Server) Accepted() []Accepted {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Accepted(nil), s.accepted...)
}

// Requests returns a copy of every call in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// AcceptedByEvent counts stored messages per event id (Ext).
func (s *Server) AcceptedByEvent() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]int{}
	for _, a := range s.accepted {
		m[a.EventID]++
	}
	return m
}

// Stats summarises the rate limits as the server saw them.
type Stats struct {
	Requests, Accepted, Duplicates, Dropped, Rejected int
	// MaxAppPerSecond / MaxGroupPerSecond: most calls (app) and messages
	// (group, accepted or dropped) in one wall-clock second.
	MaxAppPerSecond, MaxGroupPerSecond int
	// MaxAppWindow / MaxGroupWindow: the same over any sliding 1 s window.
	MaxAppWindow, MaxGroupWindow int
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Requests: len(s.requests), Accepted: len(s.accepted), MaxAppPerSecond: s.maxAppSec,
		MaxGroupPerSecond: s.maxGrpSec, MaxAppWindow: s.maxAppWin, MaxGroupWindow: s.maxGrpWin}
	for _, r := range s.requests {
		switch {
		case r.Outcome == "duplicate":
			st.Duplicates++
		case r.Outcome == "dropped":
			st.Dropped++
		case r.Outcome != "accepted":
			st.Rejected++
		}
	}
	return st
}

type wireReq struct {
	GroupID        *string         `json:"GroupId"`
	Random         *uint32         `json:"Random"`
	MsgPriority    *string         `json:"MsgPriority"`
	MsgBody        json.RawMessage `json:"MsgBody"`
	FromAccount    string          `json:"From_Account"`
	OnlineOnlyFlag json.RawMessage `json:"OnlineOnlyFlag"`
	SendMsgControl json.RawMessage `json:"SendMsgControl"`
	ToAccount      json.RawMessage `json:"To_Account"`
}

type wireElem struct {
	MsgType    string `json:"MsgType"`
	MsgContent struct {
		Data *string `json:"Data"`
		Desc string  `json:"Desc"`
		Ext  string  `json:"Ext"`
	} `json:"MsgContent"`
}

type wireResp struct {
	ActionStatus  string `json:"ActionStatus"`
	ErrorCode     int    `json:"ErrorCode"`
	ErrorInfo     string `json:"ErrorInfo"`
	MsgTime       int64  `json:"MsgTime,omitempty"`
	MsgSeq        uint64 `json:"MsgSeq,omitempty"`
	MsgDropReason string `json:"MsgDropReason"`
}

// ServeHTTP implements send_group_msg.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := s.cfg.Now()
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var req wireReq
	parseErr := json.Unmarshal(body, &req)
	var elems []wireElem
	if parseErr == nil && len(req.MsgBody) > 0 {
		_ = json.Unmarshal(req.MsgBody, &elems)
	}
	rec := Request{BodySHA: sha256.Sum256(body), At: arrived}
	if req.GroupID != nil {
		rec.GroupID = *req.GroupID
	}
	if req.Random != nil {
		rec.Random = *req.Random
	}
	if len(elems) == 1 {
		rec.EventID = elems[0].MsgContent.Ext
	}

	f := s.takeFault(rec)
	if f != nil && f.Arrived != nil {
		select {
		case f.Arrived <- rec.EventID:
		default:
		}
	}
	if f != nil && f.Delay > 0 {
		select {
		case <-time.After(f.Delay):
		case <-r.Context().Done():
			return
		}
	}
	if f != nil && !f.AfterAccept && (f.HTTPStatus != 0 || f.Code != 0 || f.FreqCtrl) {
		s.answerFault(w, f, rec)
		return
	}
	resp := s.handle(r, body, parseErr, &req, elems, rec)
	if f != nil && f.AfterAccept && (f.HTTPStatus != 0 || f.Code != 0) {
		s.answerFault(w, f, Request{}) // the message's fate is already recorded
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func (s *Server) takeFault(rec Request) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if (f.EventID != "" && f.EventID != rec.EventID) || (f.GroupID != "" && f.GroupID != rec.GroupID) {
			continue
		}
		if f.Times > 0 {
			f.Times--
			if f.Times == 0 {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			}
		}
		return f
	}
	return nil
}

func (s *Server) answerFault(w http.ResponseWriter, f *Fault, rec Request) {
	if rec.At != (time.Time{}) {
		rec.Outcome, rec.Code = "fault", f.Code
		s.mu.Lock()
		s.requests = append(s.requests, rec)
		s.mu.Unlock()
	}
	switch {
	case f.HTTPStatus != 0:
		w.WriteHeader(f.HTTPStatus)
		_, _ = io.WriteString(w, "<html>502 Bad Gateway</html>")
	case f.Code != 0:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(wireResp{ActionStatus: "FAIL", ErrorCode: f.Code, ErrorInfo: "injected error " + strconv.Itoa(f.Code)})
	case f.FreqCtrl:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(wireResp{ActionStatus: "OK", MsgTime: s.cfg.Now().Unix(), MsgDropReason: "MsgFreqCtrl"})
	}
}

func fail(code int, info string) wireResp {
	return wireResp{ActionStatus: "FAIL", ErrorCode: code, ErrorInfo: info}
}

// handle validates and applies one call; it records the request.
func (s *Server) handle(r *http.Request, body []byte, parseErr error, req *wireReq, elems []wireElem, rec Request) wireResp {
	resp := s.check(r, body, parseErr, req, elems)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := rec.At
	if resp.ErrorCode == 0 {
		// App limit: every valid call counts against the SDKAppID.
		sec := now.Unix()
		n := s.appBucket.add(sec)
		s.maxAppSec = max(s.maxAppSec, n)
		s.appWin = slide(append(s.appWin, now), now)
		s.maxAppWin = max(s.maxAppWin, len(s.appWin))
		if n > s.cfg.AppCallsPerSecond {
			resp = fail(tencentim.CodeAppRateLimited, "REST API call frequency exceeds the limit")
		}
	}
	if resp.ErrorCode == 0 && s.gone[*req.GroupID] {
		resp = fail(tencentim.CodeGroupNotFound, "group does not exist")
	}
	if resp.ErrorCode != 0 {
		rec.Outcome, rec.Code = "error "+strconv.Itoa(resp.ErrorCode), resp.ErrorCode
		s.requests = append(s.requests, rec)
		return resp
	}
	group := *req.GroupID
	from := req.FromAccount
	if from == "" {
		from = r.URL.Query().Get("identifier")
	}
	content := sha256.Sum256(req.MsgBody)
	key := dedupKey{from: from, group: group, random: *req.Random}
	if e, ok := s.dedup[key]; ok && now.Sub(e.at) < s.cfg.DedupWindow && e.content == content {
		rec.Outcome = "duplicate"
		s.requests = append(s.requests, rec)
		return wireResp{ActionStatus: "OK", MsgTime: now.Unix(), MsgSeq: e.seq}
	}
	gb := s.grpBucket[group]
	if gb == nil {
		gb = &bucket{}
		s.grpBucket[group] = gb
	}
	n := gb.add(now.Unix())
	s.maxGrpSec = max(s.maxGrpSec, n)
	s.grpWin[group] = slide(append(s.grpWin[group], now), now)
	s.maxGrpWin = max(s.maxGrpWin, len(s.grpWin[group]))
	if n > s.cfg.GroupMessagesPerSecond {
		rec.Outcome = "dropped"
		s.requests = append(s.requests, rec)
		return wireResp{ActionStatus: "OK", MsgTime: now.Unix(), MsgDropReason: "MsgFreqCtrl"}
	}
	s.groupSeq[group]++
	seq := s.groupSeq[group]
	if len(s.dedup) > 200000 {
		for k, e := range s.dedup {
			if now.Sub(e.at) >= s.cfg.DedupWindow {
				delete(s.dedup, k)
			}
		}
	}
	s.dedup[key] = dedupEntry{content: content, at: now, seq: seq}
	prio := "Normal"
	if req.MsgPriority != nil && *req.MsgPriority != "" {
		prio = *req.MsgPriority
	}
	e := elems[0]
	s.accepted = append(s.accepted, Accepted{GroupID: group, Random: *req.Random, Priority: prio,
		EventID: e.MsgContent.Ext, EventType: e.MsgContent.Desc, Data: *e.MsgContent.Data,
		BodySHA: sha256.Sum256(body), Seq: seq, At: now})
	rec.Outcome = "accepted"
	s.requests = append(s.requests, rec)
	return wireResp{ActionStatus: "OK", MsgTime: now.Unix(), MsgSeq: seq}
}

// slide drops entries older than one second before now.
func slide(w []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(w) && !w[i].After(now.Add(-time.Second)) {
		i++
	}
	return w[i:]
}

// check is the stateless validation: URL, UserSig, JSON shape, size.
func (s *Server) check(r *http.Request, body []byte, parseErr error, req *wireReq, elems []wireElem) wireResp {
	if r.Method != http.MethodPost || r.URL.Path != tencentim.SendGroupMsgPath {
		return fail(tencentim.CodeBadURL, "invalid URL or method")
	}
	q := r.URL.Query()
	if q.Get("contenttype") != "json" {
		return fail(tencentim.CodeBadURL, "contenttype must be json")
	}
	if v := q.Get("random"); v == "" {
		return fail(tencentim.CodeBadURL, "random is required")
	} else if _, err := strconv.ParseUint(v, 10, 32); err != nil {
		return fail(tencentim.CodeBadURL, "random must be a uint32")
	}
	appStr := q.Get("sdkappid")
	if appStr == "" {
		return fail(tencentim.CodeNoSDKAppID, "sdkappid is required")
	}
	app, err := strconv.ParseInt(appStr, 10, 64)
	if err != nil || app != s.cfg.SDKAppID {
		return fail(tencentim.CodeSDKAppIDInvalid, "invalid sdkappid")
	}
	id := q.Get("identifier")
	if id == "" {
		return fail(60004, "identifier is required")
	}
	if id != s.cfg.AdminIdentifier {
		return fail(60010, "identifier is not an app admin")
	}
	info, err := tencentim.VerifyUserSig(q.Get("usersig"), s.cfg.SDKAppID, s.cfg.SecretKey, id, s.cfg.Now())
	switch err {
	case nil:
	case tencentim.ErrSigExpired:
		return fail(tencentim.CodeSigExpired, "usersig expired")
	case tencentim.ErrSigAppIDMismatch:
		return fail(tencentim.CodeSigAppMismatch, "usersig sdkappid mismatch")
	case tencentim.ErrSigIdentifierMismatch:
		return fail(tencentim.CodeSigMismatch, "usersig identifier mismatch")
	case tencentim.ErrSigBadHMAC:
		return fail(tencentim.CodeSigBadKey, "usersig verification failed")
	default:
		return fail(tencentim.CodeSigInvalid, "usersig invalid")
	}
	s.mu.Lock()
	invalid := info.Time.Unix() < s.invalidTill
	s.mu.Unlock()
	if invalid {
		return fail(tencentim.CodeSigInvalidated, "usersig invalidated")
	}
	if len(body) == 0 || parseErr != nil {
		return fail(tencentim.CodeJSONParse, "request body is not JSON")
	}
	if req.GroupID == nil || *req.GroupID == "" || req.Random == nil || len(req.MsgBody) == 0 {
		return fail(tencentim.CodeInvalidParam, "GroupId, Random and MsgBody are required")
	}
	if len(req.OnlineOnlyFlag) > 0 || len(req.SendMsgControl) > 0 || len(req.ToAccount) > 0 {
		return fail(tencentim.CodeInvalidParam, "OnlineOnlyFlag, SendMsgControl and To_Account are not allowed in AVChatRoom")
	}
	if req.MsgPriority != nil {
		switch *req.MsgPriority {
		case "High", "Normal", "Low":
		default:
			return fail(tencentim.CodeInvalidParam, "MsgPriority must be High, Normal or Low")
		}
	}
	if len(req.MsgBody) > s.cfg.MaxMessageBytes {
		return fail(tencentim.CodeMessageTooLong, fmt.Sprintf("message of %d bytes is too long", len(req.MsgBody)))
	}
	if len(elems) != 1 || elems[0].MsgType != "TIMCustomElem" || elems[0].MsgContent.Data == nil {
		return fail(tencentim.CodeInvalidParam, "MsgBody must hold one TIMCustomElem with Data")
	}
	return wireResp{}
}

// Listen serves the fake on addr ("127.0.0.1:0" picks a port) and returns
// its base URL and a stop function.
func (s *Server) Listen(addr string) (string, func() error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + strings.TrimPrefix(ln.Addr().String(), "http://"), srv.Close, nil
}
