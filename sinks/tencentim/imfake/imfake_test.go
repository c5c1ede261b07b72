package imfake_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/hyapp/roomflow/sinks/tencentim"
	"github.com/hyapp/roomflow/sinks/tencentim/imfake"
)

const (
	app   = 1400000000
	key   = "fake-test-key"
	admin = "administrator"
)

type resp struct {
	ActionStatus  string
	ErrorCode     int
	MsgSeq        uint64
	MsgDropReason string
}

func call(t *testing.T, base string, q url.Values, body string) resp {
	t.Helper()
	r, err := http.Post(base+tencentim.SendGroupMsgPath+"?"+q.Encode(), "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var out resp
	if err := json.NewDecoder(r.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func params(now time.Time) url.Values {
	sig, _ := tencentim.GenUserSig(app, key, admin, now, time.Hour)
	q := url.Values{}
	q.Set("sdkappid", strconv.Itoa(app))
	q.Set("identifier", admin)
	q.Set("usersig", sig)
	q.Set("random", "12345")
	q.Set("contenttype", "json")
	return q
}

const good = `{"GroupId":"g1","Random":7,"MsgPriority":"High","MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":{"Data":"{}","Desc":"RoomGiftSent","Ext":"e1"}}]}`

func TestFakeChecksRequests(t *testing.T) {
	clock := time.Now()
	f := imfake.New(imfake.Config{SDKAppID: app, AdminIdentifier: admin, SecretKey: key, Now: func() time.Time { return clock }})
	srv := httptest.NewServer(f)
	defer srv.Close()

	without := func(k string) url.Values { q := params(clock); q.Del(k); return q }
	with := func(k, v string) url.Values { q := params(clock); q.Set(k, v); return q }
	cases := []struct {
		name string
		q    url.Values
		body string
		code int
	}{
		{"no contenttype", without("contenttype"), good, 60009},
		{"no random", without("random"), good, 60009},
		{"random not u32", with("random", "4294967296"), good, 60009},
		{"no sdkappid", without("sdkappid"), good, 60012},
		{"other sdkappid", with("sdkappid", "1400000001"), good, 60006},
		{"not admin", with("identifier", "bob"), good, 60010},
		{"garbage sig", with("usersig", "abc"), good, 70003},
		{"empty body", params(clock), ``, 60002},
		{"not json", params(clock), `{`, 60002},
		{"no GroupId", params(clock), `{"Random":1,"MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":{"Data":"x"}}]}`, 10004},
		{"no Random", params(clock), `{"GroupId":"g","MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":{"Data":"x"}}]}`, 10004},
		{"To_Account in AVChatRoom", params(clock), `{"GroupId":"g","Random":1,"To_Account":["a"],"MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":{"Data":"x"}}]}`, 10004},
		{"bad priority", params(clock), `{"GroupId":"g","Random":1,"MsgPriority":"high","MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":{"Data":"x"}}]}`, 10004},
		{"no Data", params(clock), `{"GroupId":"g","Random":1,"MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":{"Desc":"x"}}]}`, 10004},
		{"two elems", params(clock), `{"GroupId":"g","Random":1,"MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":{"Data":"x"}},{"MsgType":"TIMCustomElem","MsgContent":{"Data":"y"}}]}`, 10004},
		{"ok", params(clock), good, 0},
	}
	for _, c := range cases {
		if got := call(t, srv.URL, c.q, c.body); got.ErrorCode != c.code {
			t.Errorf("%s: code %d, want %d", c.name, got.ErrorCode, c.code)
		}
	}
	// An expired sig: generated two hours before the server's clock.
	old, _ := tencentim.GenUserSig(app, key, admin, clock.Add(-2*time.Hour), time.Hour)
	if got := call(t, srv.URL, with("usersig", old), good); got.ErrorCode != 70001 {
		t.Errorf("expired sig: %d", got.ErrorCode)
	}

	// Dedup: same Random and content within 5 minutes is not stored again
	// and is answered OK with the first MsgSeq; other content with the
	// same Random is a new message; after the window it is new again.
	first := f.Stats().Accepted
	dup := call(t, srv.URL, params(clock), good)
	if dup.ErrorCode != 0 || f.Stats().Accepted != first || f.Stats().Duplicates != 1 {
		t.Fatalf("duplicate: %+v %+v", dup, f.Stats())
	}
	other := `{"GroupId":"g1","Random":7,"MsgPriority":"High","MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":{"Data":"{\"x\":1}","Desc":"RoomGiftSent","Ext":"e2"}}]}`
	if r := call(t, srv.URL, params(clock), other); r.ErrorCode != 0 || f.Stats().Accepted != first+1 {
		t.Fatalf("same Random, other content: %+v %+v", r, f.Stats())
	}
	clock = clock.Add(5*time.Minute + time.Second)
	if r := call(t, srv.URL, params(clock), good); r.ErrorCode != 0 || f.Stats().Accepted != first+2 {
		t.Fatalf("after the dedup window: %+v %+v", r, f.Stats())
	}

	// AfterAccept: the message is stored, the answer is lost (502).
	f.Inject(imfake.Fault{EventID: "e3", HTTPStatus: 502, AfterAccept: true, Times: 1})
	body := `{"GroupId":"g1","Random":8,"MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":{"Data":"{}","Ext":"e3"}}]}`
	r, err := http.Post(srv.URL+tencentim.SendGroupMsgPath+"?"+params(clock).Encode(), "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 502 || f.AcceptedByEvent()["e3"] != 1 {
		t.Fatalf("after-accept fault: status %d, accepted %d", r.StatusCode, f.AcceptedByEvent()["e3"])
	}
}
