package hub

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
)

func sign(key ed25519.PrivateKey, d *SignedDecision) {
	d.Signature = ed25519.Sign(key, d.Payload())
}

// LoadOrCreateKey reads the hub's Ed25519 key from path, creating it (mode 0600) and its public
// half (path + ".pub", mode 0644, for the gate) when it does not exist.
func LoadOrCreateKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(priv)
		if err != nil {
			return nil, err
		}
		if err := atomicfile.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			return nil, err
		}
		if err := WritePublicKey(path+".pub", priv.Public().(ed25519.PublicKey)); err != nil {
			return nil, err
		}
		return priv, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hub key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("hub key %s: not PEM; remove it to have a new one made (the gate then needs the new %s.pub)", path, path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("hub key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("hub key %s is a %T, not Ed25519", path, k)
	}
	if _, err := os.Stat(path + ".pub"); errors.Is(err, os.ErrNotExist) {
		if err := WritePublicKey(path+".pub", priv.Public().(ed25519.PublicKey)); err != nil {
			return nil, err
		}
	}
	return priv, nil
}

// WritePublicKey writes pub as PEM.
func WritePublicKey(path string, pub ed25519.PublicKey) error {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644)
}

// TokenFile returns the token in path, creating the file (mode 0600) with a new random token
// when it does not exist.
func TokenFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		var b [32]byte
		rand.Read(b[:])
		tok := base64.RawURLEncoding.EncodeToString(b[:])
		if err := atomicfile.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			return "", err
		}
		return tok, nil
	}
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(data))
	if len(tok) < 16 {
		return "", fmt.Errorf("token file %s holds a token shorter than 16 characters; remove it to have a new one made", path)
	}
	return tok, nil
}
