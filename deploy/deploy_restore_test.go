package deploy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/cmd/roomflow/command"
	"github.com/hyapp/roomflow/internal/testenv"
)

// The process Deployment's liveness probe must never kill a processor
// whose state restore is merely slow (a big changelog, a slow broker):
// restarted, it would start the restore again, for ever. /healthz stays
// 200 through a restore longer than the probe's failure window (read from
// deploy/kubernetes/process.yaml), while /readyz says the pod restores and
// keeps it out of the Service until it is done.
//
// The restore is made slow by holding every fetch of the mic processor's
// changelog at the fake broker until the window has passed.
func TestHealthzThroughSlowRestore(t *testing.T) {
	window, probe := livenessWindow(t)
	if testing.Short() {
		t.Skipf("-short: this test holds a restore for longer than the liveness window (%.0fs)", window)
	}
	if probe.HTTPGet == nil || probe.HTTPGet.Path != "/healthz" {
		t.Fatalf("process.yaml: the liveness probe is not GET /healthz: %+v", probe)
	}
	hold := time.Duration(window*float64(time.Second)) + 3*time.Second

	k := testenv.NewKafka(t, testenv.Partitions(3))
	if k.Fake == nil {
		t.Skip("holding the changelog's fetches needs kfake's request control; it cannot on a real cluster")
	}
	m := testenv.NewMySQL(t)
	changelog := k.Config.Topics.MicStateChangelog
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	td, err := k.Admin(t).ListTopics(ctx, changelog)
	if err != nil || td[changelog].Err != nil {
		t.Fatalf("changelog topic: %v %v", err, td[changelog].Err)
	}
	changelogID := [16]byte(td[changelog].ID)

	// From the first fetch of the changelog on, hold each one until the
	// hold has passed (SleepControl parks only that request's connection:
	// the restore's own consumer; the marker transaction and the group go on).
	var releaseAt atomic.Int64
	var held atomic.Int32
	k.Fake.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake.KeepControl()
		for _, tp := range kreq.(*kmsg.FetchRequest).Topics {
			if tp.Topic != changelog && tp.TopicID != changelogID {
				continue
			}
			releaseAt.CompareAndSwap(0, time.Now().Add(hold).UnixNano())
			if wait := time.Until(time.Unix(0, releaseAt.Load())); wait > 0 {
				held.Add(1)
				k.Fake.SleepControl(func() { time.Sleep(wait) })
			}
			break
		}
		return nil, nil, false
	})

	addr := testenv.ClosedAddr(t)
	var b strings.Builder
	b.WriteString("log:\n  level: error\nmetrics:\n  addr: \"" + addr + "\"\n")
	b.WriteString("mysql:\n  dsn: \"" + m.DSN + "\"\n")
	b.WriteString(k.ConfigYAML(3))
	b.WriteString("process:\n  mic_group: " + testenv.UniqueName(t) + "\n  commit_interval: 50ms\n")
	stop, out := testenv.StartCommand(t, command.NewRoot, testenv.WriteConfig(t, b.String()), "process", "--only", "mic", "--instance-id", "restore-1")

	get := func(path string) (int, string, error) {
		c := http.Client{Timeout: 2 * time.Second}
		resp, err := c.Get("http://" + addr + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), nil
	}
	var serving, restoringSince, readyAt time.Time
	deadline := time.Now().Add(hold + 90*time.Second)
	for readyAt.IsZero() && time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		code, body, err := get("/healthz")
		if serving.IsZero() {
			if err != nil {
				continue // not listening yet
			}
			serving = time.Now()
		}
		if err != nil || code != http.StatusOK {
			t.Fatalf("/healthz failed %s after the server came up (restoring since %v): %d %q %v\n%s",
				time.Since(serving), restoringSince, code, body, err, out.String())
		}
		code, body, err = get("/readyz")
		switch {
		case err != nil:
			t.Fatalf("/readyz: %v", err)
		case code == http.StatusOK:
			readyAt = time.Now()
		case strings.Contains(body, "restoring") && restoringSince.IsZero():
			restoringSince = time.Now()
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("process after cancel: %v\n%s", err, out.String())
	}
	if readyAt.IsZero() {
		t.Fatalf("never ready within %s of the hold (%d fetches held)\n%s", 90*time.Second, held.Load(), out.String())
	}
	if held.Load() == 0 || restoringSince.IsZero() {
		t.Fatalf("the restore was not held (held fetches %d) or never reported (restoring since %v)", held.Load(), restoringSince)
	}
	restore := readyAt.Sub(restoringSince)
	if restore.Seconds() <= window {
		t.Fatalf("the restore took %s, not longer than the liveness window %.0fs: the test proves nothing", restore, window)
	}
	t.Logf("restore %s, liveness window %.0fs (periodSeconds %d × failureThreshold %d): /healthz 200 throughout",
		restore, window, probe.PeriodSeconds, probe.FailureThreshold)
}
