package tencentim_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/hyapp/roomflow/sinks/tencentim"
	"github.com/hyapp/roomflow/sinks/tencentim/imfake"
)

// A redirect is not followed: net/http would send the request URL, usersig
// and all, to the new host as the Referer (and a 307 the body with it),
// and take that host's answer for Tencent's.
func TestRedirectIsNotFollowed(t *testing.T) {
	f := imfake.New(imfake.Config{SDKAppID: vecApp, AdminIdentifier: "admin", SecretKey: vecKey})
	var mu sync.Mutex
	var referers []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		referers = append(referers, r.Header.Get("Referer"))
		mu.Unlock()
		f.ServeHTTP(w, r)
	}))
	defer other.Close()
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+tencentim.SendGroupMsgPath+"?"+r.URL.RawQuery, http.StatusTemporaryRedirect)
	}))
	defer front.Close()
	c, _ := tencentim.New(imCfg(front.URL))
	m, _ := build(giftEnvelope("redirected", "r"), "")
	_, err := c.Send(context.Background(), m)
	mu.Lock()
	defer mu.Unlock()
	for _, ref := range referers {
		if strings.Contains(ref, "usersig=") {
			t.Errorf("the redirect's host got the usersig in the Referer: %s", ref)
		}
	}
	if cl, code := tencentim.Classification(err); cl != tencentim.Retryable || code != tencentim.PseudoCodeHTTP || len(referers) != 0 {
		t.Fatalf("send through a redirect: %v (%s/%s), %d requests reached its host; want an http error and none", err, cl, code, len(referers))
	}
}

// A server's words net/http quotes in an error (a redirect's Location that
// does not parse) may echo the request URL back: the error and the log
// still hold no usersig.
func TestEchoedURLLeavesNoUserSig(t *testing.T) {
	sigs := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sigs <- r.URL.Query().Get("usersig")
		w.Header().Set("Location", "https://gateway:bad-port"+r.URL.RequestURI())
		w.WriteHeader(http.StatusMovedPermanently)
	}))
	defer srv.Close()
	var logs bytes.Buffer
	cfg := imCfg(srv.URL)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, _ := tencentim.New(cfg)
	m, _ := build(giftEnvelope("echoed", "r"), "")
	_, err := c.Send(context.Background(), m)
	if err == nil {
		t.Fatal("expected an error")
	}
	sig := <-sigs
	for _, s := range []string{sig, url.QueryEscape(sig)} {
		if sig == "" || strings.Contains(err.Error(), s) || strings.Contains(logs.String(), s) {
			t.Fatalf("the usersig is in the error or the log: %v\n%s", err, logs.String())
		}
	}
	if cl, code := tencentim.Classification(err); cl != tencentim.Retryable || code != tencentim.PseudoCodeTransport {
		t.Fatalf("%v: %s/%s, want a retryable transport error", err, cl, code)
	}
}
