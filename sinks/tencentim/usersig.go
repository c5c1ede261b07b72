package tencentim

import (
	"bytes"
	"compress/zlib"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// UserSig errors returned by VerifyUserSig. The fake server maps them to
// Tencent's error codes; they never carry the sig or the key.
var (
	ErrSigMalformed          = errors.New("tencentim: usersig malformed")
	ErrSigExpired            = errors.New("tencentim: usersig expired")
	ErrSigAppIDMismatch      = errors.New("tencentim: usersig sdkappid does not match the request")
	ErrSigIdentifierMismatch = errors.New("tencentim: usersig identifier does not match the request")
	ErrSigBadHMAC            = errors.New("tencentim: usersig signature does not verify")
)

// sigContent is the string TLSSigAPIv2 signs.
func sigContent(identifier string, sdkAppID int64, t, expire int64) string {
	return "TLS.identifier:" + identifier + "\n" +
		"TLS.sdkappid:" + strconv.FormatInt(sdkAppID, 10) + "\n" +
		"TLS.time:" + strconv.FormatInt(t, 10) + "\n" +
		"TLS.expire:" + strconv.FormatInt(expire, 10) + "\n"
}

// SigHMAC is TLSSigAPIv2's TLS.sig field: base64(HMAC-SHA256(key, content)).
// Exported for the test vector.
func SigHMAC(secretKey, identifier string, sdkAppID int64, t, expire int64) string {
	h := hmac.New(sha256.New, []byte(secretKey))
	h.Write([]byte(sigContent(identifier, sdkAppID, t, expire)))
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// sigDoc is the JSON document inside a UserSig. Field order follows the
// official library; verification compares decoded values, not bytes.
type sigDoc struct {
	Ver        string `json:"TLS.ver"`
	Identifier string `json:"TLS.identifier"`
	SDKAppID   int64  `json:"TLS.sdkappid"`
	Expire     int64  `json:"TLS.expire"`
	Time       int64  `json:"TLS.time"`
	Sig        string `json:"TLS.sig"`
}

// GenUserSig returns a TLSSigAPIv2 UserSig for identifier valid from now for
// expire (rounded down to seconds, at least one second).
func GenUserSig(sdkAppID int64, secretKey, identifier string, now time.Time, expire time.Duration) (string, error) {
	exp := int64(expire / time.Second)
	if exp <= 0 {
		return "", errors.New("tencentim: usersig lifetime must be at least 1s")
	}
	t := now.Unix()
	doc := sigDoc{Ver: "2.0", Identifier: identifier, SDKAppID: sdkAppID, Expire: exp, Time: t,
		Sig: SigHMAC(secretKey, identifier, sdkAppID, t, exp)}
	raw, err := json.Marshal(doc)
	if err != nil {
		return "", fmt.Errorf("tencentim: usersig json: %w", err)
	}
	var buf bytes.Buffer
	zw := zlib.NewWriter(&buf)
	if _, err := zw.Write(raw); err != nil {
		return "", fmt.Errorf("tencentim: usersig deflate: %w", err)
	}
	if err := zw.Close(); err != nil {
		return "", fmt.Errorf("tencentim: usersig deflate: %w", err)
	}
	return sigURLReplacer.Replace(base64.StdEncoding.EncodeToString(buf.Bytes())), nil
}

var (
	sigURLReplacer   = strings.NewReplacer("+", "*", "/", "-", "=", "_")
	sigURLUnreplacer = strings.NewReplacer("*", "+", "-", "/", "_", "=")
)

// SigInfo is what a verified UserSig says.
type SigInfo struct {
	Identifier string
	SDKAppID   int64
	Time       time.Time
	Expire     time.Duration
}

// ExpiresAt is the instant after which the sig is refused.
func (s SigInfo) ExpiresAt() time.Time { return s.Time.Add(s.Expire) }

// VerifyUserSig checks sig the way Tencent does: decode, inflate, parse,
// match sdkappid and identifier against the request, check the lifetime at
// now and recompute the HMAC (constant-time compare).
func VerifyUserSig(sig string, sdkAppID int64, secretKey, identifier string, now time.Time) (SigInfo, error) {
	raw, err := base64.StdEncoding.DecodeString(sigURLUnreplacer.Replace(sig))
	if err != nil {
		return SigInfo{}, ErrSigMalformed
	}
	zr, err := zlib.NewReader(bytes.NewReader(raw))
	if err != nil {
		return SigInfo{}, ErrSigMalformed
	}
	js, err := io.ReadAll(io.LimitReader(zr, 64<<10))
	if err != nil {
		return SigInfo{}, ErrSigMalformed
	}
	var doc sigDoc
	if err := json.Unmarshal(js, &doc); err != nil || doc.Sig == "" {
		return SigInfo{}, ErrSigMalformed
	}
	info := SigInfo{Identifier: doc.Identifier, SDKAppID: doc.SDKAppID, Time: time.Unix(doc.Time, 0), Expire: time.Duration(doc.Expire) * time.Second}
	if doc.SDKAppID != sdkAppID {
		return info, ErrSigAppIDMismatch
	}
	if doc.Identifier != identifier {
		return info, ErrSigIdentifierMismatch
	}
	want := SigHMAC(secretKey, doc.Identifier, doc.SDKAppID, doc.Time, doc.Expire)
	if !hmac.Equal([]byte(want), []byte(doc.Sig)) {
		return info, ErrSigBadHMAC
	}
	if now.Unix() > doc.Time+doc.Expire {
		return info, ErrSigExpired
	}
	return info, nil
}
