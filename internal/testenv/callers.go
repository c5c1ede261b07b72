package testenv

import (
	"crypto/tls"
	"testing"

	"github.com/hyapp/roomflow/internal/tlsx"
)

// Caller is one client of an mTLS listener test: how it dials and what
// the listener must answer.
type Caller struct {
	Name string
	// TLS is the client config; nil dials plaintext.
	TLS *tls.Config
	// Refused is the roomflow_rpc_refused_total reason the listener must
	// count; "" for the caller that must be served.
	Refused string
}

// AllowedClient is the SPIFFE id of the caller Callers admits (put it in
// allowed_client_names).
const AllowedClient = "spiffe://cluster.local/ns/room/sa/room-service"

// Callers are the five callers every mTLS listener is tried with: a
// plaintext client, a TLS client without a certificate, a client
// certificate from another CA, a certificate of p's CA whose names
// (ns/room/sa/other, other.test) are not allowed, and the allowed one
// (AllowedClient as its URI SAN). Each trusts p's CA, so a refusal is
// the listener's.
func (p *PKI) Callers(t testing.TB) []Caller {
	t.Helper()
	other := NewPKI(t, "other.test", true)
	stranger := other.Issue(t, LeafOpts{Name: "room-service", URIs: []string{AllowedClient}})
	notAllowed := p.Issue(t, LeafOpts{Name: "other", DNS: []string{"other.test"}, URIs: []string{"spiffe://cluster.local/ns/room/sa/other"}})
	allowed := p.Issue(t, LeafOpts{Name: "room-service", URIs: []string{AllowedClient}})
	return []Caller{
		{Name: "plaintext", Refused: tlsx.ReasonPlaintext},
		{Name: "TLS without a client certificate", TLS: p.ClientTLS(nil), Refused: tlsx.ReasonNoClientCert},
		{Name: "client certificate of another CA", TLS: p.ClientTLS(&stranger), Refused: tlsx.ReasonUntrustedCert},
		{Name: "client certificate whose names are not allowed", TLS: p.ClientTLS(&notAllowed), Refused: tlsx.ReasonNameNotAllowed},
		{Name: "allowed client", TLS: p.ClientTLS(&allowed)},
	}
}
