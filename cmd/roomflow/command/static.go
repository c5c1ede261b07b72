package command

import (
	"github.com/spf13/pflag"

	"github.com/hyapp/roomflow/internal/app"
)

// instanceIDFlag defines --instance-id, which every component command and
// `run` share.
func instanceIDFlag(fs *pflag.FlagSet) {
	fs.String("instance-id", "", "this replica's stable id, unique per replica (the pod name): static group membership "+
		"as <id>-<component>, so a restarted process takes its partitions straight back; "+
		"default none (dynamic members)")
}

// memberID is component's static group member id, "<instance-id>-<component>",
// or "" (a dynamic member) without --instance-id. The suffix keeps the ids
// of the groups one process joins (relay, room, mic, sink, publish-im)
// apart even where two of them were configured with the same group name.
func memberID(d *app.Deps, component string) string {
	id := d.Flag("instance-id")
	if id == "" {
		return ""
	}
	return id + "-" + component
}
