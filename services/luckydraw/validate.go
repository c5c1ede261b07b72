package luckydraw

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/domain/fairness"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// The one validation of a lucky gift request's fields, for Check and
// Execute alike: room-service debits after an enabled Check, so Check
// refuses every field Execute would refuse (design.md, "No debit without a
// record"), and Execute records a debited request it cannot draw.

// MaxRoomID is the room_id column size; a longer room id is
// InvalidArgument (a usage error for the admin commands).
const MaxRoomID = 64

// Column sizes of lucky_draw_records.
const (
	maxAppCode   = 32
	maxCommandID = 128
	maxGiftID    = 64
	maxRequestID = 128
	maxDeviceID  = 128
	maxReceiptID = 128
	maxVersion   = 64
)

// RejectInvalidRequest is the reject reason of an Execute whose key fields
// are valid but another field is not (FieldError.Key false): room-service
// debited it, so it is stored and refunded like any rejection, never drawn.
const RejectInvalidRequest = "invalid_request"

// FieldError is a request field failing its check. Key: a field a
// rejection is stored and refunded under (app_code, command_id, room_id,
// gift_id, billing_receipt_id, coin_spent), so Execute has nothing to
// record it under: InvalidArgument, nothing written, a caller bug (alert
// LuckyInvalidDrawRequest). Otherwise Execute records the request as a
// rejection RejectInvalidRequest. Check answers InvalidArgument for both.
type FieldError struct {
	Field   string // as the request names it: meta.device_id, gift_count
	Problem string // "is longer than 128 bytes", "must be > 0"
	Key     bool
}

func (e *FieldError) Error() string { return e.Field + " " + e.Problem }

// GRPCStatus is e as an answer: InvalidArgument naming the field.
func (e *FieldError) GRPCStatus() *status.Status { return status.New(codes.InvalidArgument, e.Error()) }

// giftFields are the request fields Check and Execute share, and
// Execute's billing_receipt_id and rule_version (empty in a Check).
type giftFields struct {
	meta                          *activityv1.LuckyGiftMeta
	giftID                        string
	giftCount                     int32
	coinSpent, heat               int64
	billingReceiptID, ruleVersion string
}

// validate checks f's fields as Execute does, key fields first, and
// returns the first fault (nil: none). check: f is a Check's, where the
// seed asks only for room_id and gift_id, so a field left out (zero:
// command_id "", sender_user_id 0, gift_count 0; the others' zero is
// valid anyway) is no fault, while a field present and invalid is.
func (f giftFields) validate(check bool) *FieldError {
	m := f.meta
	present := int64(1)
	if check {
		present = 0
	}
	for _, fault := range []*FieldError{
		idField("meta.command_id", m.GetCommandId(), maxCommandID, !check),
		idField("meta.room_id", m.GetRoomId(), MaxRoomID, true),
		idField("gift_id", f.giftID, maxGiftID, true),
		lenField("meta.app_code", m.GetAppCode(), maxAppCode, true),
		lenField("billing_receipt_id", f.billingReceiptID, maxReceiptID, true),
		// The refund's amount: a negative one is no refund, and one above
		// the bound the sink would dead-letter (amount_out_of_range).
		amountField("coin_spent", f.coinSpent, true),
		lenField("meta.request_id", m.GetRequestId(), maxRequestID, false),
		lenField("meta.device_id", m.GetDeviceId(), maxDeviceID, false),
		lenField("rule_version", f.ruleVersion, maxVersion, false),
		seedField(m.GetClientSeed()),
		atLeast("meta.sender_user_id", m.GetSenderUserId(), present),
		atLeast("meta.target_user_id", m.GetTargetUserId(), 0), // 0: a gift to the room
		atLeast("gift_count", int64(f.giftCount), present),
		amountField("heat_value", f.heat, false),
	} {
		if fault != nil {
			return fault
		}
	}
	return nil
}

// lenField: v fits its column of max bytes.
func lenField(field, v string, max int, key bool) *FieldError {
	if len(v) > max {
		return &FieldError{Field: field, Problem: fmt.Sprintf("is longer than %d bytes", max), Key: key}
	}
	return nil
}

// idField is a key id of a byte-exact column that pads trailing spaces
// (command_id; room_id and gift_id in lucky_pools and the risk counters):
// present when required, fitting, not ending in a space (envelope.CheckID).
func idField(field, v string, max int, required bool) *FieldError {
	switch {
	case v == "" && required:
		return &FieldError{Field: field, Problem: "is required", Key: true}
	case envelope.CheckID(field, v) != nil:
		return &FieldError{Field: field, Problem: "ends in a space", Key: true}
	}
	return lenField(field, v, max, true)
}

// amountField: a gift's coins within [0, envelope.MaxGiftCoins], so the
// stages that sum them stay inside BIGINT.
func amountField(field string, v int64, key bool) *FieldError {
	if err := envelope.CheckAmount(field, v, envelope.MaxGiftCoins); err != nil {
		return &FieldError{Field: field, Problem: fmt.Sprintf("is %d, outside [0, %d]", v, envelope.MaxGiftCoins), Key: key}
	}
	return nil
}

// atLeast: v >= min.
func atLeast(field string, v, min int64) *FieldError {
	if v < min {
		return &FieldError{Field: field, Problem: fmt.Sprintf("must be >= %d", min)}
	}
	return nil
}

func seedField(seed string) *FieldError {
	if fairness.CheckClientSeed(seed) != nil {
		return &FieldError{Field: "meta.client_seed", Problem: fmt.Sprintf("must be valid UTF-8 of at most %d bytes", fairness.MaxClientSeed)}
	}
	return nil
}

// storable makes r's values fit lucky_draw_records for its rejection row
// (r.invalid: nothing is drawn): device_id and request_id clipped at a
// UTF-8 boundary, a faulty client_seed blanked (a partial seed is no
// user's input) and a rule_version too long blanked (a clipped one names
// no version; the rejection takes the deciding one). The giftPayload stays
// as sent: a repeat compares with it.
func (r *drawReq) storable() {
	r.deviceID, r.requestID = envelope.Clip(r.deviceID, maxDeviceID), envelope.Clip(r.requestID, maxRequestID)
	if seedField(r.clientSeed) != nil {
		r.clientSeed = ""
	}
	if len(r.ruleVersion) > maxVersion {
		r.ruleVersion = ""
	}
}
