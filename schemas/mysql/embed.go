// Package mysql holds roomflow's MySQL schema as numbered migrations,
// embedded in the binary and applied by `roomflow migrate`.
//
// Files are named NNNN_description.sql and applied in number order, each
// once. A migration's text never changes after release: add a new file.
// Every statement must run on MySQL 8.0 and MariaDB 10.11.
package mysql

import "embed"

// Migrations is the migrations/ directory.
//
//go:embed migrations/*.sql
var Migrations embed.FS
