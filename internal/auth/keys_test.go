package auth

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeyFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), KeyFileName)
	k1, err := LoadKeyFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(k1.Hash) != 64 || len(k1.Block) != 32 {
		t.Fatalf("keys of %d and %d bytes", len(k1.Hash), len(k1.Block))
	}
	info, err := os.Stat(file)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v (%v), want 0600", info.Mode().Perm(), err)
	}
	k2, err := LoadKeyFile(file)
	if err != nil || !bytes.Equal(k1.Hash, k2.Hash) || !bytes.Equal(k1.Block, k2.Block) {
		t.Fatalf("a second start read other keys (%v): sessions would not outlive a restart", err)
	}

	// A file others may read is made private again.
	os.Chmod(file, 0o644)
	if _, err := LoadKeyFile(file); err != nil {
		t.Fatal(err)
	}
	if info, _ := os.Stat(file); info.Mode().Perm() != 0o600 {
		t.Fatalf("a 0644 key file was left %v", info.Mode().Perm())
	}

	if err := RotateKeyFile(file); err != nil {
		t.Fatal(err)
	}
	k3, err := LoadKeyFile(file)
	if err != nil || bytes.Equal(k1.Hash, k3.Hash) {
		t.Fatalf("rotating kept the keys (%v)", err)
	}
	if info, _ := os.Stat(file); info.Mode().Perm() != 0o600 {
		t.Fatalf("a rotated key file is %v", info.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(file), ".session.key-*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}

	os.WriteFile(file, []byte("not keys\n"), 0o600)
	if _, err := LoadKeyFile(file); err == nil || !strings.Contains(err.Error(), "keys rotate") {
		t.Fatalf("a damaged key file: %v", err)
	}
}

func TestKeysFromSecret(t *testing.T) {
	secret := strings.Repeat("s3cret-", 6)
	a, err := KeysFromSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := KeysFromSecret(secret)
	c, _ := KeysFromSecret(secret + "!")
	if !bytes.Equal(a.Hash, b.Hash) || bytes.Equal(a.Hash, c.Hash) || bytes.Equal(a.Hash[:32], a.Block) {
		t.Fatal("keys are not a function of the secret alone")
	}
	if _, err := KeysFromSecret("short"); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Fatalf("a short secret: %v", err)
	}
}
