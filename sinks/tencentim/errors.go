package tencentim

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Class is what the publisher does about a failed send.
type Class int

const (
	// Retryable failures (network, timeouts, Tencent internal errors, rate
	// limits, MsgFreqCtrl drops) are retried on the fixed interval.
	Retryable Class = iota + 1
	// RegenerateSig failures (70001 expired, 70052 invalidated) are retried
	// at once with a freshly generated UserSig.
	RegenerateSig
	// Permanent failures will not succeed by retrying the same request
	// (bad group, too long, no permission, bad credentials). IM-5 in
	// docs/requirements.md still retries them on the fixed interval unless
	// im.mark_permanent_failed is set; the code is recorded either way.
	Permanent
)

func (c Class) String() string {
	switch c {
	case Retryable:
		return "retryable"
	case RegenerateSig:
		return "regenerate_sig"
	case Permanent:
		return "permanent"
	}
	return "unknown"
}

// Error codes roomflow names. The full table is in Classify.
const (
	CodeSigExpired      = 70001
	CodeSigInvalidated  = 70052
	CodeAccountLocked   = 70050
	CodeMessageTooLong  = 80002
	CodeJSONTooLong     = 93000
	CodeAppRateLimited  = 60007
	CodeGroupNotFound   = 10010
	CodeInvalidParam    = 10004
	CodeInternal        = 10002
	CodeSendFrequency   = 10023
	CodeSigMismatch     = 70013
	CodeSigAppMismatch  = 70014
	CodeSigInvalid      = 70003
	CodeSigBadKey       = 70009
	CodeJSONParse       = 60002
	CodeBadURL          = 60009
	CodeNoSDKAppID      = 60012
	CodeSDKAppIDInvalid = 60006
)

// Pseudo codes recorded in metrics and last_error for failures that have no
// Tencent error code.
const (
	// PseudoCodeHTTP is a non-200 HTTP status (the status is in the error).
	PseudoCodeHTTP = "http"
	// PseudoCodeTransport is a connection error or timeout.
	PseudoCodeTransport = "transport"
	// PseudoCodeFreqCtrl is an OK answer with MsgDropReason=MsgFreqCtrl.
	PseudoCodeFreqCtrl = "MsgFreqCtrl"
	// PseudoCodeDropped is an OK answer with a MsgDropReason that is no
	// short identifier (its text is in the error).
	PseudoCodeDropped = "dropped"
)

var permanentCodes = map[int]bool{
	10003: true, 10004: true, 10007: true, 10010: true, 10015: true, 10016: true, 10017: true,
	10026: true, 80001: true, 80002: true, 93000: true, 60002: true, 60003: true, 60004: true,
	60005: true, 60006: true, 60009: true, 60010: true, 70403: true, 60012: true, 60016: true,
	60017: true, 60020: true, 60021: true, 70002: true, 70003: true, 70005: true, 70009: true,
	70013: true, 70014: true, 70016: true, 70020: true, 70107: true,
}

var retryableCodes = map[int]bool{
	10002: true, 10006: true, 10023: true, 60007: true, 60011: true, 60018: true, 60019: true,
	60008: true, 70169: true, 70202: true, 70500: true, 20004: true, 20005: true, 90992: true,
	90994: true, 90995: true, 91000: true,
	// 70050: the admin account is locked for 60 s after repeated sig
	// failures; waiting is the only remedy, so it is retried (and alerted
	// on through the code label).
	70050: true,
}

// Classify maps a Tencent ErrorCode to what to do about it. Codes outside
// the documented tables are retried: an unknown code must never make a
// room system message disappear.
func Classify(code int) Class {
	switch {
	case code == CodeSigExpired || code == CodeSigInvalidated:
		return RegenerateSig
	case permanentCodes[code]:
		return Permanent
	case retryableCodes[code]:
		return Retryable
	}
	return Retryable
}

// RateLimited reports whether code asks the caller to slow down.
func RateLimited(code int) bool {
	switch code {
	case 10006, 10023, 60007, 60011, 60018, 60019:
		return true
	}
	return false
}

// APIError is a FAIL answer from Tencent IM. Info is Tencent's ErrorInfo,
// truncated; it never contains the request URL or credentials.
type APIError struct {
	Code  int
	Info  string
	Class Class
}

func (e *APIError) Error() string {
	return fmt.Sprintf("tencentim: error %d (%s): %s", e.Code, e.Class, e.Info)
}

// HTTPError is a non-200 HTTP answer (Tencent answers 200 unless the
// network path failed, e.g. a 502 from a gateway). Always retryable.
type HTTPError struct{ Status int }

func (e *HTTPError) Error() string { return "tencentim: http status " + strconv.Itoa(e.Status) }

// TransportError is a connection failure or timeout. The request URL (which
// carries the usersig) has been removed: Op and Err only.
type TransportError struct {
	Op  string // "Post"
	Err error  // the cause with any *url.Error unwrapped
}

func (e *TransportError) Error() string {
	return "tencentim: " + e.Op + " send_group_msg: " + e.Err.Error()
}
func (e *TransportError) Unwrap() error { return e.Err }

// scrubURLError removes the URL from err: Go's *url.Error prints the whole
// request URL, and Tencent's URL carries the usersig. Words of the server
// net/http quotes (a Location header that does not parse) may echo the URL
// back, so sig, as sent and escaped, is cut from what is left.
func scrubURLError(err error, sig string) error {
	op := "Post"
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
		// A nested url.Error (redirects) is scrubbed too.
		for errors.As(err, &ue) {
			err = ue.Err
		}
		op = ue.Op
	}
	if msg := err.Error(); sig != "" && (strings.Contains(msg, sig) || strings.Contains(msg, url.QueryEscape(sig))) {
		err = errors.New(strings.NewReplacer(url.QueryEscape(sig), "REDACTED", sig, "REDACTED").Replace(msg))
	}
	return &TransportError{Op: op, Err: err}
}

// dropCode is the metric code of a MsgDropReason: the reason itself
// when it is a short identifier (MsgFreqCtrl), else "dropped", so Tencent's
// text never makes an invalid or unbounded label value.
func dropCode(reason string) string {
	if reason == "" || len(reason) > 40 {
		return PseudoCodeDropped
	}
	for _, c := range reason {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return PseudoCodeDropped
		}
	}
	return reason
}

// DroppedError is an OK answer that nevertheless did not deliver the
// message (MsgDropReason, e.g. MsgFreqCtrl). Retryable.
type DroppedError struct{ Reason string }

func (e *DroppedError) Error() string { return "tencentim: message dropped: " + e.Reason }

// TooLargeError is a message over im.max_message_bytes, refused before any
// call; classified Permanent with Tencent's 80002.
type TooLargeError struct{ Size, Limit int }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("tencentim: message of %d bytes exceeds the %d byte limit", e.Size, e.Limit)
}

// Classification of any error a Send returns: the class and the code to
// record (Tencent's ErrorCode as a decimal string, or a pseudo code).
func Classification(err error) (Class, string) {
	var ae *APIError
	var he *HTTPError
	var de *DroppedError
	var te *TooLargeError
	switch {
	case err == nil:
		return 0, "0"
	case errors.As(err, &ae):
		return ae.Class, strconv.Itoa(ae.Code)
	case errors.As(err, &te):
		return Permanent, strconv.Itoa(CodeMessageTooLong)
	case errors.As(err, &he):
		return Retryable, PseudoCodeHTTP
	case errors.As(err, &de):
		return Retryable, dropCode(de.Reason)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return Retryable, "timeout"
	case errors.As(err, new(*TransportError)):
		return Retryable, PseudoCodeTransport
	}
	var pe *PayloadError
	if errors.As(err, &pe) {
		return Permanent, "payload"
	}
	return Retryable, "error"
}
