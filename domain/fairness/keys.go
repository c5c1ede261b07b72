package fairness

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
)

// Keyring encrypts seeds at rest with AES-256-GCM under its current key
// and decrypts with the current or any older key, so keys rotate: a new
// key encrypts the seeds made from then on, the seeds made before stay
// readable while their key is listed.
type Keyring struct {
	current cipher.AEAD
	old     []cipher.AEAD
}

// ErrKey is a key that is not 32 bytes of standard base64. Its text never
// contains the key.
var ErrKey = errors.New("must be 32 bytes, standard base64")

// ParseKey decodes a base64 32-byte key.
func ParseKey(b64 string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(k) != 32 {
		return nil, ErrKey
	}
	return k, nil
}

// NewKeyring returns the keyring of current and old (base64). Errors name
// the bad key by position ("old_keys[1]") without its text.
func NewKeyring(current string, old []string) (*Keyring, error) {
	r := &Keyring{}
	var err error
	if r.current, err = newAEAD(current); err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	for i, k := range old {
		a, err := newAEAD(k)
		if err != nil {
			return nil, fmt.Errorf("old_keys[%d]: %w", i, err)
		}
		r.old = append(r.old, a)
	}
	return r, nil
}

func newAEAD(b64 string) (cipher.AEAD, error) {
	k, err := ParseKey(b64)
	if err != nil {
		return nil, err
	}
	b, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// Seal encrypts seed under the current key, bound to aad (the app and day,
// so a sealed seed cannot be moved to another day): nonce || ciphertext.
func (r *Keyring) Seal(seed, aad []byte) ([]byte, error) {
	nonce := make([]byte, r.current.NonceSize(), r.current.NonceSize()+len(seed)+r.current.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return r.current.Seal(nonce, nonce, seed, aad), nil
}

// ErrUndecryptable is a sealed seed no key of the ring opens (a key
// dropped from old_keys too soon, or tampered data).
var ErrUndecryptable = errors.New("fairness: no configured key decrypts the seed (is its key in lucky.fairness.old_keys?)")

// Open decrypts sealed with the current key, else the old ones in order.
func (r *Keyring) Open(sealed, aad []byte) ([]byte, error) {
	for _, a := range append([]cipher.AEAD{r.current}, r.old...) {
		n := a.NonceSize()
		if len(sealed) < n {
			break
		}
		if seed, err := a.Open(nil, sealed[:n], sealed[n:], aad); err == nil {
			return seed, nil
		}
	}
	return nil, ErrUndecryptable
}

// AAD is the additional data a seed of app_code's day starting at dayMs
// is sealed with.
func AAD(app string, dayMs int64) []byte { return fmt.Appendf(nil, "%s\x00%d", app, dayMs) }
