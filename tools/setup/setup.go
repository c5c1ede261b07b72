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
// fails there, saying which.
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
