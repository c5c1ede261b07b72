// Package schemas is the protobuf contract: the .proto sources under
// proto/ (generated into the *v1 packages and roomflow.protoset by `make
// proto`), kept here as written because the Schema Registry registers a
// protobuf schema as its source text.
package schemas

import "embed"

// Proto holds schemas/proto: Proto.ReadFile("proto/" + path) is the source
// of the file registered as path (hyapp/user/v1/mic.proto, ...).
//
//go:embed proto
var Proto embed.FS
