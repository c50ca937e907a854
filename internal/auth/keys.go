package auth

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The console's session cookie is signed with a 64-byte key and encrypted
// with a 32-byte one (AES-256). The keys used to live in the database,
// where anyone who could read it could make cookies; they now live in a
// file of their own beside it, readable by modelserve's user alone, or are
// derived from a secret the operator gives at start (for a deployment
// whose data directory is not the place for secrets).
//
// The cookie carries the session's secret (see Sessions) and the CSRF
// token; the keys keep both unreadable and unforgeable in the browser.
const (
	// KeyFileName is the key file's name in the data directory.
	KeyFileName = "session.key"
	hashKeyLen  = 64
	blockKeyLen = 32
	// MinSecret is the shortest secret keys are derived from: 32
	// characters of a password generator is far beyond guessing.
	MinSecret = 32
)

// SessionKeys sign (Hash) and encrypt (Block) the console's cookies.
type SessionKeys struct {
	Hash, Block []byte
}

// NewSessionKeys makes random keys.
func NewSessionKeys() SessionKeys {
	b := make([]byte, hashKeyLen+blockKeyLen)
	// crypto/rand does not fail on the systems Go supports.
	rand.Read(b)
	return SessionKeys{Hash: b[:hashKeyLen], Block: b[hashKeyLen:]}
}

// KeysFromSecret derives the keys from an operator's secret, so that
// every replica of the console given the same secret reads the same
// cookies, and no key is written anywhere.
func KeysFromSecret(secret string) (SessionKeys, error) {
	if len(secret) < MinSecret {
		return SessionKeys{}, fmt.Errorf("the session secret is %d characters; give at least %d (for example: openssl rand -base64 48)", len(secret), MinSecret)
	}
	b, err := hkdf.Key(sha256.New, []byte(secret), nil, "modelserve session cookie keys v1", hashKeyLen+blockKeyLen)
	if err != nil {
		return SessionKeys{}, fmt.Errorf("derive the session keys: %w", err)
	}
	return SessionKeys{Hash: b[:hashKeyLen], Block: b[hashKeyLen:]}, nil
}

// LoadKeyFile reads the keys from file, making the file (mode 0600) with
// new keys when there is none: the first start. A file others may read is
// made private again.
func LoadKeyFile(file string) (SessionKeys, error) {
	k, err := readKeyFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		// Made whole under another name and linked into place: a second
		// process starting at the same moment either wins or reads the
		// winner's keys, never half a file.
		if err := writeKeyFile(file, NewSessionKeys(), os.Link); err != nil && !errors.Is(err, fs.ErrExist) {
			return SessionKeys{}, err
		}
		k, err = readKeyFile(file)
	}
	return k, err
}

// RotateKeyFile replaces the keys in file with new ones. Cookies made with
// the old keys no longer open: with the sessions revoked too, everyone
// signs in again.
func RotateKeyFile(file string) error {
	return writeKeyFile(file, NewSessionKeys(), os.Rename)
}

func readKeyFile(file string) (SessionKeys, error) {
	info, err := os.Stat(file)
	if err != nil {
		return SessionKeys{}, err
	}
	if info.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(file, 0o600); err != nil {
			return SessionKeys{}, fmt.Errorf("the key file %s can be read by others and cannot be made private (%w): chmod 600 it", file, err)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return SessionKeys{}, fmt.Errorf("read the key file %s: %w", file, err)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(raw) != hashKeyLen+blockKeyLen {
		return SessionKeys{}, fmt.Errorf("the key file %s is not %d base64-encoded bytes: delete it, or run modelserve keys rotate, to make new keys (everyone signs in again)",
			file, hashKeyLen+blockKeyLen)
	}
	return SessionKeys{Hash: raw[:hashKeyLen], Block: raw[hashKeyLen:]}, nil
}

// writeKeyFile writes k to a new private file beside file and puts it in
// place with place (os.Link: only if there is none; os.Rename: replacing).
func writeKeyFile(file string, k SessionKeys, place func(from, to string) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), ".session.key-*")
	if err != nil {
		return fmt.Errorf("make the key file %s: %w", file, err)
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file 0600 whatever the umask; said again here,
	// as the whole point of the file is that nobody else reads it.
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("make the key file %s: %w", file, err)
	}
	text := base64.StdEncoding.EncodeToString(append(append([]byte{}, k.Hash...), k.Block...)) + "\n"
	if _, err := tmp.WriteString(text); err != nil {
		tmp.Close()
		return fmt.Errorf("write the key file %s: %w", file, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write the key file %s: %w", file, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write the key file %s: %w", file, err)
	}
	if err := place(tmp.Name(), file); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		return fmt.Errorf("put the key file in place at %s: %w", file, err)
	}
	return nil
}
