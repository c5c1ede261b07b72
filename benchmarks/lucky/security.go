package main

import (
	"crypto/tls"
	"log/slog"
	"os"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/internal/tlsx"
)

// security is the transport of -mtls: a throwaway PKI (testenv.MakePKI in
// a temporary directory), the draw listener's lucky.tls (room-service's
// SPIFFE id allowed), the fake wallet's TLS and roomflow's client
// certificate toward it. The zero value is plaintext.
type security struct {
	dir          string
	server       *tlsx.Server // lucky.tls
	client       *tls.Config  // room-service's side of the draws
	walletServer *tlsx.Server
	walletClient *tls.Config // lucky.wallet_tls
}

func newSecurity(on bool) (*security, error) {
	if !on {
		return &security{}, nil
	}
	dir, err := os.MkdirTemp("", "luckybench-pki-")
	if err != nil {
		return nil, err
	}
	s := &security{dir: dir}
	p, err := testenv.MakePKI(dir, "lucky.bench", true)
	if err != nil {
		s.close()
		return nil, err
	}
	quiet := slog.New(slog.DiscardHandler)
	if s.server, err = (tlsx.ServerConfig{CertFile: p.ServerCert, KeyFile: p.ServerKey, ClientCAFile: p.CAFile,
		AllowedClientNames: []string{testenv.AllowedClient}}).Load(quiet); err != nil {
		s.close()
		return nil, err
	}
	room, err := p.IssueErr(testenv.LeafOpts{Name: "room-service", URIs: []string{testenv.AllowedClient}})
	if err != nil {
		s.close()
		return nil, err
	}
	s.client = p.ClientTLS(&room)
	// The fake wallet uses the same CA and admits roomflow by name.
	const roomflowID = "spiffe://cluster.local/ns/roomflow/sa/roomflow"
	if s.walletServer, err = (tlsx.ServerConfig{CertFile: p.ServerCert, KeyFile: p.ServerKey, ClientCAFile: p.CAFile,
		AllowedClientNames: []string{roomflowID}}).Load(quiet); err != nil {
		s.close()
		return nil, err
	}
	rf, err := p.IssueErr(testenv.LeafOpts{Name: "roomflow", URIs: []string{roomflowID}, File: "roomflow"})
	if err != nil {
		s.close()
		return nil, err
	}
	if s.walletClient, err = (tlsx.ClientFiles{CAFile: p.CAFile, CertFile: rf.CertFile, KeyFile: rf.KeyFile, Reload: true, Logger: quiet}).Load(); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// clientCreds are the draw clients' transport credentials.
func (s *security) clientCreds() credentials.TransportCredentials {
	if s.client == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(s.client)
}

func (s *security) close() {
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}
