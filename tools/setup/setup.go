// Package setup is what `roomflow migrate` and `roomflow topics` do
// beyond their flags: bring the MySQL schema and the Kafka topics to what
// this release needs, idempotently, and say what they found.
package setup

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/migrate"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/internal/schemareg"
)

// Migrate applies the embedded migrations mysql.dsn's database has not
// applied yet (waiting at most lockWait for another migrate) and prints
// the schema version.
func Migrate(ctx context.Context, cfg *config.Config, lockWait time.Duration, log *slog.Logger, w io.Writer) error {
	db, err := mysqlx.Open(ctx, cfg.MySQL)
	if err != nil {
		return err
	}
	defer db.Close()
	ms, err := migrate.Load()
	if err != nil {
		return err
	}
	res, err := migrate.Up(ctx, db, ms, lockWait, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "schema at version %d (%d applied now)\n", res.Current, len(res.Applied))
	return nil
}

// Topics creates the design's topics that do not exist and checks the
// others (kafkax.EnsureTopics), within a minute, and prints a line per
// topic. The cluster is pinged first: a wrong password, CA or listener
// fails there, saying which. With schema_registry.url set it then
// registers the public topics' schemas (Schemas).
func Topics(ctx context.Context, cfg *config.Config, w io.Writer) error {
	kc := cfg.Kafka.Cluster(nil, nil)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := kc.Ping(ctx); err != nil {
		return err
	}
	cl, err := kc.NewClient("topics")
	if err != nil {
		return err
	}
	defer cl.Close()
	statuses, err := kafkax.EnsureTopics(ctx, kadm.NewClient(cl), cfg.TopicLayout())
	PrintTopics(w, statuses)
	if err != nil || cfg.SchemaRegistry.URL == "" {
		return err
	}
	return Schemas(ctx, cfg, w)
}

// Schemas registers every public topic's value schema in the registry at
// schema_registry.url (schemareg.Client.Register) and prints a subject a
// line: subject, schema id, version.
func Schemas(ctx context.Context, cfg *config.Config, w io.Writer) error {
	cl, err := schemareg.New(cfg.SchemaRegistry, schemareg.Builtin())
	if err != nil {
		return err
	}
	regs, err := cl.Register(ctx, cfg.Kafka.Topics.List())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBJECT\tID\tVERSION\tCOMPATIBILITY")
	for _, r := range regs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", r.Subject, r.ID, r.Version, schemareg.Compatibility)
	}
	tw.Flush()
	return err
}

// PrintTopics prints a topic a line: name, partitions, compacted, created
// now.
func PrintTopics(w io.Writer, statuses []kafkax.TopicStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tCOMPACTED\tCREATED")
	for _, s := range statuses {
		fmt.Fprintf(tw, "%s\t%d\t%v\t%v\n", s.Name, s.Partitions, s.Compacted, s.Created)
	}
	tw.Flush()
}
