// Package envelope is roomflow's record contract in one place: how a
// hyapp.room.v1.EventEnvelope and its payloads are read (zero-copy views),
// which headers every record carries and the one function that writes them,
// the one dead-letter record builder, and the compatibility rule of the
// internal formats. Every stage, `roomflow verify`, `roomflow peek` and the
// load generator use it, so the copies cannot drift.
//
// # Views
//
// View, MicChanged and GiftSent read the protobuf wire format directly:
// fields are sub-slices of the input (no copies, no allocations) and
// acceptance matches proto.Unmarshal of the generated types: malformed
// wire data, truncation, field number 0 or above 2^29-1 and invalid UTF-8 in
// a string field are errors; unknown fields, and known fields with an
// unexpected wire type, are skipped as unknown fields; for a repeated
// singular field the last occurrence wins. FuzzView checks this against
// proto.Unmarshal. A view is valid only while its input is unchanged.
//
// # Trusted input
//
// View.ParseTrusted and MicChanged.ParseTrusted skip one check of Parse,
// the UTF-8 validity of string fields, and accept what Parse accepts plus
// strings that are not UTF-8 (FuzzTrustedView checks both against Parse).
// They are for records a roomflow stage wrote after reading the same bytes
// with Parse: hyapp.user.mic-events.v1, which only the room processor
// writes, copying envelopes it parsed with View.Parse and payloads it
// parsed with MicChanged.Parse (the mic processor reads it trusted). Input
// from outside roomflow (room-service's topic, tools, the DLQ) is always
// read with Parse: FuzzView's contract is unchanged. A record written to
// the mic events topic by anything else is outside the contract; its
// strings would reach the public mic records unchecked.
//
// # Compatibility of internal formats
//
// Rolling upgrades run two releases side by side, so every value one
// release writes to an internal topic must be readable by the next. The
// rule, for every internal format: a reader decodes every older version;
// a writer writes the newest version the previous release can read (a new
// version is written only once the release that reads it is everywhere);
// a reader that meets a newer version than it knows fails with a
// *VersionError (errors.Is ErrNewerVersion) and never guesses. The formats
// and where their versions live:
//
//   - changelog values (processors/streams): a leading version byte, 1;
//   - mic state values, session and day-room sets, user totals and the
//     totals bootstrap marker (processors/mic): version 1 is the unprefixed
//     protobuf wire encoding; a later version starts with a byte
//     0x02..0x07, which no protobuf tag starts with (field 0);
//   - the relay position (producers/relay, EncodePosition): a leading
//     version byte, 2, with a version 1 decoder; one relay is active at a
//     time, so it writes the newest version it knows at once (roll relays
//     forward, not back);
//   - the ledger entry hyapp.user.v1.MicLedgerEntry: protobuf's evolution
//     rules (fields are only added, never renumbered or retyped, and a new
//     field's zero value means what older writers meant); a change an older
//     reader must not silently ignore gets a new event_type instead, which
//     an older sink refuses.
package envelope
