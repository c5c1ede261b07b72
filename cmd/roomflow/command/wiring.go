// The wiring: each component package maps its own keys of the application
// config onto its Config (ConfigFrom in its appconfig.go: validated, errors
// keyed by the operator's dotted keys). What is left here is what only the
// process knows (its registry, logger, flags) and what composes several
// components.

package command

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/domain/lucky/rulestore"
	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/processors/mic/micproc"
	"github.com/hyapp/roomflow/processors/room"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/producers/relay"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"github.com/hyapp/roomflow/services/luckydraw/wallet"
	"github.com/hyapp/roomflow/services/statsapi"
	"github.com/hyapp/roomflow/sinks/imoutbox"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/appliers"
	"github.com/hyapp/roomflow/sinks/mysql/retention"
)

// registerer is where a component's metrics go: d.Registry, or none
// (a nil *prometheus.Registry must not become a non-nil Registerer).
func registerer(d *app.Deps) prometheus.Registerer {
	if d.Registry == nil {
		return nil
	}
	return d.Registry
}

// checkComponents validates every component whose settings need no
// deployment secret: the relay, the processors, the sink, the stats API
// and the draw service (all but its audit key). publish-im's keys include
// the IM credentials, given only where it runs, so it checks them at its
// own start (imPublisherConfig). `roomflow config` runs it, so a bad
// component key is found without starting the component.
func checkComponents(d *app.Deps) error {
	var ch cfgerr.Checks
	add := func(_ any, err error) { ch.Add(err) }
	add(relayConfig(d, ""))
	add(roomConfig(d))
	add(rulestore.ConfigFrom(d.Config))
	add(micConfig(d))
	add(sinkConfig(d))
	add(appliers.StoreConfigFrom(d.Config))
	add(statsAPIConfig(d))
	add(retention.ConfigFrom(d.Config, nil, retention.Config{
		RelayedBelow: func(context.Context) (uint64, bool, error) { return 0, false, nil }, Registerer: registerer(d), Logger: d.Log}))
	ch.Add(checkLuckyKeys(d))
	return ch.Err()
}

// checkLuckyKeys validates roomflow lucky's keys except lucky.audit_key, a
// secret given only where the draw service (or its audit) runs, which
// checks it at its start.
func checkLuckyKeys(d *app.Deps) error {
	cfg := *d.Config
	cfg.Lucky.AuditKey = cmp.Or(cfg.Lucky.AuditKey, "checked where roomflow lucky runs")
	return CheckLucky(&app.Deps{Config: &cfg, Log: d.Log})
}

// CheckLucky validates every part of `roomflow lucky` before anything
// connects (the deployment tests check their configs with it).
func CheckLucky(d *app.Deps) error {
	_, err := luckyServerConfig(d)
	var addrErr error
	// Checked here: net.Listen would refuse it only after MySQL, exit 1.
	if a := d.Config.Lucky.GRPCAddr; a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			addrErr = &cfgerr.FieldError{Key: "lucky.grpc_addr", Msg: fmt.Sprintf("must be host:port (got %q)", a)}
		}
	}
	return errors.Join(err, luckydraw.CheckTLSFrom(d.Config), addrErr)
}

// luckyServerConfig is the draw service's Config, its outbox worker's and
// its wallet client's, every one checked (errors joined); the certificates
// and the instance are the start's to add.
func luckyServerConfig(d *app.Deps) (luckydraw.ServerConfig, error) {
	draw, err1 := luckyDrawConfig(d)
	outbox, err2 := luckyOutboxConfig(d)
	w, err3 := wallet.ConfigFrom(d.Config)
	return luckydraw.ServerConfig{Draw: draw, Outbox: outbox, Wallet: w}, errors.Join(err1, err2, err3)
}

// The components' Configs as this process runs them: its metrics and logs
// (d.Registry and d.Log may be nil: a check at load), --instance-id and
// the sink's flags. instanceID makes the replica a static member ("":
// dynamic).
func relayConfig(d *app.Deps, instanceID string) (relay.Config, error) {
	return relay.ConfigFrom(d.Config, relay.Config{InstanceID: instanceID, Registerer: registerer(d), Logger: d.Log})
}

// processSelection is the processors `roomflow process` runs: "" (both),
// "room" or "mic", from --only or else process.only.
func processSelection(d *app.Deps) (string, error) {
	if only := d.Flag("only"); only != "" {
		if only != "room" && only != "mic" {
			return "", cfgerr.Usage(fmt.Errorf("--only: must be room or mic (got %q)", only))
		}
		return only, nil
	}
	switch only := d.Config.Process.Only; only {
	case "", "room", "mic":
		return only, nil
	default:
		return "", &cfgerr.FieldError{Key: "process.only", Msg: fmt.Sprintf("must be empty, room or mic (got %q)", only)}
	}
}

func roomConfig(d *app.Deps) (room.Config, error) {
	return room.ConfigFrom(d.Config, streams.Config{Registerer: registerer(d), Logger: d.Log}, d.Flag("instance-id"))
}

func micConfig(d *app.Deps) (micproc.Config, error) {
	return micproc.ConfigFrom(d.Config, streams.Config{Registerer: registerer(d), Logger: d.Log}, d.Flag("instance-id"))
}

// sinkConfig's owner id is --owner-id, default --instance-id.
func sinkConfig(d *app.Deps) (mysqlsink.Config, error) {
	ownerID := cmp.Or(d.Flag("owner-id"), d.Flag("instance-id"))
	parallelism, err := d.Flags.GetInt("parallelism")
	if err != nil {
		return mysqlsink.Config{}, err
	}
	return mysqlsink.ConfigFrom(d.Config, mysqlsink.Config{OwnerID: ownerID, InstanceID: memberID(d, "sink"), Parallelism: parallelism,
		Health: d.Health, Registerer: registerer(d), Logger: d.Log})
}

func statsAPIConfig(d *app.Deps) (statsapi.Config, error) {
	return statsapi.ConfigFrom(d.Config, statsapi.Config{Registerer: registerer(d), Logger: d.Log})
}

func imPublisherConfig(d *app.Deps, instanceID string) (imoutbox.Config, error) {
	return imoutbox.ConfigFrom(d.Config, imoutbox.Config{InstanceID: instanceID,
		ServiceConfig: imoutbox.ServiceConfig{Registerer: registerer(d), Logger: d.Log}})
}

// luckydraw.NewServer sets the outbox worker's id and dispatch switch.
func luckyDrawConfig(d *app.Deps) (luckydraw.Config, error) {
	return luckydraw.ConfigFrom(d.Config, luckydraw.Config{Registerer: registerer(d), Logger: d.Log})
}

func luckyOutboxConfig(d *app.Deps) (luckyoutbox.Config, error) {
	return luckyoutbox.ConfigFrom(d.Config, luckyoutbox.Config{Registerer: registerer(d), Logger: d.Log})
}
