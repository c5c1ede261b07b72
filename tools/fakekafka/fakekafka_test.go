package fakekafka_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/tools/fakekafka"
)

// The broker listens on the host asked for and answers Kafka requests; a
// malformed --listen is named.
func TestStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // a free port for the broker
	c, err := fakekafka.Start(addr, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.ListenAddrs(); len(got) != 1 || got[0] != addr {
		t.Fatalf("listening on %v, want %s", got, addr)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).BrokerMetadata(context.Background()); err != nil {
		t.Fatalf("metadata: %v", err)
	}
	for _, bad := range []string{"no-port", "127.0.0.1:http"} {
		if _, err := fakekafka.Start(bad, 1, ""); err == nil || !strings.HasPrefix(err.Error(), "--listen: ") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
