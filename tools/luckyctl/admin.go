package luckyctl

import (
	"context"
	"database/sql"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// OpenAdmin opens MySQL and the operator change maker for one command:
// the AdminConfig of cfg with own's Wait and Operator (--wait,
// --operator), checked before MySQL is opened (a bad one is a usage error
// naming it). The caller closes the database.
func OpenAdmin(ctx context.Context, cfg *config.Config, own luckydraw.AdminConfig) (*sql.DB, *luckydraw.Admin, error) {
	acfg, err := luckydraw.AdminConfigFrom(cfg, own)
	if err != nil {
		return nil, nil, err
	}
	db, err := mysqlx.Open(ctx, cfg.MySQL)
	if err != nil {
		return nil, nil, err
	}
	a, err := luckydraw.NewAdmin(db, acfg)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, a, nil
}
