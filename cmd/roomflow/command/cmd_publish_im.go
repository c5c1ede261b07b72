package command

import (
	"context"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/sinks/imoutbox"
)

func publishIMSpec() app.Spec {
	return componentSpec("publish-im", "Publish room events to Tencent IM (Kafka fast path + room_outbox compensation worker)", instanceIDFlag,
		CheckPublishIM,
		func(ctx context.Context, d *app.Deps) (app.Component, error) {
			member := app.StaticMember{Group: d.Config.OutboxWorker.Group, ID: memberID(d, "publish-im")}
			cfg, err := imPublisherConfig(d, member.ID) // bad keys, missing credentials: before dialling MySQL
			if err != nil {
				return nil, err
			}
			db, err := d.DB(ctx)
			if err != nil {
				return nil, err
			}
			p, err := imoutbox.NewPublisher(cfg, db)
			if err != nil {
				return nil, err
			}
			return app.LeavingOnStop(d, "publish-im", p, member), nil
		})
}

// CheckPublishIM validates the keys of `roomflow publish-im` (the IM
// credentials included) the way its start does, before anything connects.
func CheckPublishIM(d *app.Deps) error {
	_, err := imPublisherConfig(d, "")
	return err
}
