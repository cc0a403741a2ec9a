package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
)

// The audit key: an Ed25519 key of the gate's own (not the CA's), in two files beside each other:
// the private half (PKCS #8 PEM, mode 0600), named by the gate's -audit-key (default
// DIR/audit.key), and the public half (PKIX PEM, mode 0644) with ".pub" after the private file's
// name. Its id is the hex of the first 8 bytes of the SHA-256 of the public key.

// KeyFileName is the private key's default name in the audit directory; PubSuffix is added to
// a private key's path for its public half.
const (
	KeyFileName = "audit.key"
	PubSuffix   = ".pub"
	HeadName    = "head.json"
)

// maxKeyFile bounds a key file's read.
const maxKeyFile = 16 << 10

// KeyID is the id of a public key as records and heads name it.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// ErrKeyExists is returned by GenerateKey when the key file is already there.
var ErrKeyExists = errors.New("audit: the audit key exists")

// GenerateKey creates a new audit key at path (and its public half beside it) and returns the
// public key. It never overwrites either file.
func GenerateKey(path string, random io.Reader) (ed25519.PublicKey, error) {
	if random == nil {
		random = rand.Reader
	}
	for _, p := range []string{path, path + PubSuffix} {
		if _, err := os.Lstat(p); err == nil {
			return nil, fmt.Errorf("%w: %s; an audit key is never replaced implicitly: keep it, or move it aside yourself (the records it signed stay verifiable with its public key)", ErrKeyExists, p)
		}
	}
	pub, priv, err := ed25519.GenerateKey(random)
	if err != nil {
		return nil, fmt.Errorf("audit: generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, pathError("create", filepath.Dir(path), err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, pathError("create", path, err)
	}
	err = pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, pathError("write", path, err)
	}
	if err := os.WriteFile(path+PubSuffix, EncodePublicKey(pub), 0o644); err != nil {
		return nil, pathError("write", path+PubSuffix, err)
	}
	return pub, nil
}

// EncodePublicKey is the PEM of pub, as the .pub file holds it.
func EncodePublicKey(pub ed25519.PublicKey) []byte {
	der, _ := x509.MarshalPKIXPublicKey(pub)
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// ReadPublicKey reads a public key file (PEM, as the .pub file beside the key).
func ReadPublicKey(path string) (ed25519.PublicKey, error) {
	data, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("audit: %s: not a PEM public key; give the .pub file beside the audit key", path)
	}
	k, err := x509.ParsePKIXPublicKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("audit: %s: %w", path, err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("audit: %s: not an Ed25519 key", path)
	}
	return pub, nil
}

// readPrivateKey reads the private half.
func readPrivateKey(path string) (ed25519.PrivateKey, error) {
	data, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("audit: %s: not a PEM private key (lockhttp audit keygen writes one)", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("audit: %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("audit: %s: not an Ed25519 key", path)
	}
	return priv, nil
}

// readKeyFile reads a key or head file of the audit, bounded (atomicfile.ReadFile), with the
// audit's errors.
func readKeyFile(path string) ([]byte, error) {
	data, err := atomicfile.ReadFile(path, maxKeyFile)
	var tl *atomicfile.TooLargeError
	switch {
	case errors.As(err, &tl):
		return nil, fmt.Errorf("audit: %s: larger than %d bytes: not a key file", path, maxKeyFile)
	case err != nil:
		return nil, pathError("read", path, err)
	}
	return data, nil
}

// keyError is an audit key the writer cannot use: the gate refuses traffic, as when it cannot
// write.
type keyError struct{ err error }

func (e *keyError) Error() string { return "audit: cannot sign: " + e.err.Error() }
func (e *keyError) Unwrap() error { return e.err }

// PublicReason is what the agent reads about it.
func (e *keyError) PublicReason() string {
	return "the gate cannot sign its audit (its audit key cannot be read), so nothing goes out until it can"
}

// sealer holds the writer's key, loading it (again) when it could not: a key made readable
// again is taken up without a restart.
type sealer struct {
	path string
	now  func() time.Time

	mu    sync.Mutex // guards the fields below
	key   ed25519.PrivateKey
	kid   string
	err   error
	tried time.Time
}

// get returns the key, or why there is none; a failed load is tried again at most once a second.
func (s *sealer) get() (ed25519.PrivateKey, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.key != nil {
		return s.key, s.kid, nil
	}
	if s.err != nil && s.now().Sub(s.tried) < time.Second {
		return nil, "", s.err
	}
	s.tried = s.now()
	k, err := readPrivateKey(s.path)
	if err != nil {
		s.err = &keyError{fmt.Errorf("%w; fix: make %s readable by the gate (mode 0600, its owner), or restore it from a backup; never make a new one for a log it signed", err, s.path)}
		return nil, "", s.err
	}
	s.key, s.kid, s.err = k, KeyID(k.Public().(ed25519.PublicKey)), nil
	return s.key, s.kid, nil
}

// sigPrefix ends a signed record's other fields; the signature covers the line's bytes before it.
const sigPrefix = `,"sig":"`

// lineDomain and headDomain separate what the key signs.
const (
	lineDomain = "lockhttp audit record v1\x00"
	headDomain = "lockhttp audit head v1\x00"
)

// checkLineSig checks the signature a line ends with. signed reports that it has one; kid is
// its key's id.
func checkLineSig(line []byte, keys map[string]ed25519.PublicKey) (signed bool, kid string, ok bool) {
	i := strings.LastIndex(string(line), sigPrefix)
	if i < 0 || !strings.HasSuffix(string(line), `"}`) {
		return false, "", false
	}
	val := string(line[i+len(sigPrefix) : len(line)-2])
	kid, b64, found := strings.Cut(val, ":")
	if !found {
		return true, "", false
	}
	sig, err := base64.RawStdEncoding.DecodeString(b64)
	pub := keys[kid]
	if err != nil || pub == nil || len(sig) != ed25519.SignatureSize {
		return true, kid, false
	}
	msg := make([]byte, 0, len(lineDomain)+i)
	msg = append(append(msg, lineDomain...), line[:i]...)
	return true, kid, ed25519.Verify(pub, msg, sig)
}

// Head is the signed head: the last record on disk when it was written.
type Head struct {
	Seq  int64     `json:"seq"`
	Hash string    `json:"hash"` // chainHash of the record's line
	File string    `json:"file"` // the day file holding it
	Time time.Time `json:"time"` // when the head was written
	Key  string    `json:"key"`  // the signing key's id
	Sig  string    `json:"sig"`  // base64 Ed25519 signature of headDomain and the fields above
}

func (h *Head) message() []byte {
	return []byte(fmt.Sprintf("%s%d\n%s\n%s\n%s\n%s", headDomain, h.Seq, h.Hash, h.File, h.Time.UTC().Format(time.RFC3339Nano), h.Key))
}

func (h *Head) sign(key ed25519.PrivateKey, kid string) {
	h.Key = kid
	h.Sig = base64.RawStdEncoding.EncodeToString(ed25519.Sign(key, h.message()))
}

// Check verifies the head's signature with one of keys (by id).
func (h *Head) Check(keys map[string]ed25519.PublicKey) error {
	pub := keys[h.Key]
	if pub == nil {
		return fmt.Errorf("signed by key %s, not a trusted one (%s)", h.Key, keyList(keys))
	}
	sig, err := base64.RawStdEncoding.DecodeString(h.Sig)
	if err != nil || !ed25519.Verify(pub, h.message(), sig) {
		return errors.New("its signature does not verify: it was edited or forged")
	}
	return nil
}

func keyList(keys map[string]ed25519.PublicKey) string {
	var ids []string
	for id := range keys {
		ids = append(ids, id)
	}
	return strings.Join(ids, ", ")
}

// headSlot is the size of one slot of DIR/head.json.
const headSlot = 512

// appendSlot appends h as one slot: its JSON, padded with spaces, and a newline.
func (h *Head) appendSlot(b []byte) []byte {
	start := len(b)
	data, _ := json.Marshal(h)
	b = append(b, data...)
	for len(b)-start < headSlot-1 {
		b = append(b, ' ')
	}
	return append(b, '\n')
}

// ReadHead reads a head file (DIR/head.json, or a checkpoint) and returns the newest head in it
// whose signature verifies with one of keys; with no keys, or none verifying, the newest.
func ReadHead(path string, keys ...ed25519.PublicKey) (*Head, error) {
	data, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	var heads []*Head
	// Slot by slot: a slot torn by a crash may have lost its newline, and must not take the
	// other slot with it.
	for i := 0; i*headSlot < len(data); i++ {
		slot := data[i*headSlot : min((i+1)*headSlot, len(data))]
		for _, part := range strings.Split(string(slot), "\n") {
			part = strings.Trim(part, " \x00\r\t")
			var h Head
			if part != "" && jsonUnmarshal([]byte(part), &h) == nil && h.Sig != "" {
				heads = append(heads, &h)
			}
		}
	}
	if len(heads) == 0 {
		return nil, fmt.Errorf("audit: %s: no signed head in it", path)
	}
	ids := map[string]ed25519.PublicKey{}
	for _, k := range keys {
		ids[KeyID(k)] = k
	}
	var best, newest *Head
	for _, h := range heads {
		if newest == nil || h.Seq > newest.Seq {
			newest = h
		}
		if len(ids) > 0 && h.Check(ids) == nil && (best == nil || h.Seq > best.Seq) {
			best = h
		}
	}
	if best != nil {
		return best, nil
	}
	return newest, nil
}

// SpoiledSlots reads a head file (DIR/head.json) slot by slot and returns the slots (1 and 2, in
// the file's order) that hold bytes but no whole signed head whose signature verifies with one
// of keys (with no keys: no whole signed head). The gate writes each slot whole with one pwrite:
// a killed gate cannot leave one torn, only a crash of the machine while it wrote one (the head
// is not fsync'ed), or someone who spoiled it. A slot never written is not in the file.
func SpoiledSlots(path string, keys ...ed25519.PublicKey) ([]int, error) {
	data, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	ids := map[string]ed25519.PublicKey{}
	for _, k := range keys {
		ids[KeyID(k)] = k
	}
	var spoiled []int
	for i := 0; i*headSlot < len(data); i++ {
		slot := data[i*headSlot : min((i+1)*headSlot, len(data))]
		var h Head
		whole := len(slot) == headSlot || i == 0 && len(data) < headSlot // a head file of one short head (a checkpoint's copy)
		part := strings.Trim(string(slot), " \n")
		if !whole || jsonUnmarshal([]byte(part), &h) != nil || h.Sig == "" || len(ids) > 0 && h.Check(ids) != nil {
			spoiled = append(spoiled, i+1)
		}
	}
	return spoiled, nil
}

// SpoiledText is what verify-log and the doctor say of a head file whose slots are spoiled
// (SpoiledSlots), used the head naming record seq (0: none).
func SpoiledText(path string, slots []int, seq int64) string {
	names := make([]string, len(slots))
	for i, s := range slots {
		names[i] = strconv.Itoa(s)
	}
	used := "no slot holds a signed head"
	if seq > 0 {
		used = fmt.Sprintf("the head read is the other slot's, record %d, older than the spoiled one may have been", seq)
	}
	return fmt.Sprintf("%s: slot %s holds no whole signed head: only a crash of the machine while the gate wrote it leaves that (a killed gate cannot), or someone spoiled it; %s, so lines cut off the end after it cannot be found",
		filepath.Base(path), strings.Join(names, " and "), used)
}

// signedLog reports whether dir holds a head or a signed record: a log a lost key must not be
// replaced for implicitly.
func signedLog(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, HeadName)); err == nil {
		return true
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	for _, f := range files {
		if fileHasSig(f) {
			return true
		}
	}
	return false
}

// fileHasSig reports whether a file's tail holds a signature.
func fileHasSig(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	buf := make([]byte, min(fi.Size(), 64<<10))
	f.ReadAt(buf, fi.Size()-int64(len(buf)))
	return strings.Contains(string(buf), sigPrefix)
}

var _ fs.FileMode

// appendSig signs buf[start:] (a record without its closing brace), appends the signature and
// closes the record.
func appendSig(buf []byte, start int, key ed25519.PrivateKey, kid string, scratch *[]byte) []byte {
	msg := append(append((*scratch)[:0], lineDomain...), buf[start:]...)
	*scratch = msg
	sig := ed25519.Sign(key, msg)
	buf = append(buf, sigPrefix...)
	buf = append(buf, kid...)
	buf = append(buf, ':')
	buf = base64.RawStdEncoding.AppendEncode(buf, sig)
	return append(buf, '"', '}')
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
