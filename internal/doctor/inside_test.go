package doctor

import (
	"context"
	"crypto/rand"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/signer"
)

func startSigner(t *testing.T, uids []int) string {
	t.Helper()
	dir := t.TempDir()
	ca, err := signer.InitCA(filepath.Join(dir, "ca"), time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go signer.NewServer(signer.ServerConfig{CA: ca, AllowUIDs: uids}).Serve(ctx, l)
	return sock
}

func TestProbeSigner(t *testing.T) {
	me := os.Geteuid()
	refused, how, _ := ProbeSigner(startSigner(t, []int{me + 1}), me, os.Getegid())
	if !refused || !strings.Contains(how, "closed the connection") {
		t.Errorf("a signer for another uid: refused %v, %s", refused, how)
	}
	refused, how, _ = ProbeSigner(startSigner(t, []int{me}), me, os.Getegid())
	if refused || !strings.Contains(how, "200") {
		t.Errorf("a signer for this uid: refused %v, %s", refused, how)
	}
	// No signer listening: not probed, which is not a refusal.
	if _, _, err := ProbeSigner(filepath.Join(t.TempDir(), "none.sock"), me, os.Getegid()); err == nil || !strings.Contains(err.Error(), "does not listen") {
		t.Errorf("no signer: %v", err)
	}
}

// TestProbeSignerAsAnotherUID takes another uid on one thread only: the signer allows this
// process's uid and refuses the probe's.
func TestProbeSignerAsAnotherUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("taking another uid needs root")
	}
	sock := startSigner(t, []int{0})
	// The socket where uid 65534 can reach it, so that the signer's own check answers.
	os.Chmod(filepath.Dir(filepath.Dir(sock)), 0o755)
	os.Chmod(filepath.Dir(sock), 0o755)
	os.Chmod(sock, 0o777)
	refused, how, err := ProbeSigner(sock, 65534, 65534)
	if err != nil || !refused || !strings.Contains(how, "closed the connection") {
		t.Fatalf("refused %v, %q, %v", refused, how, err)
	}
	// This process kept its credentials.
	if os.Geteuid() != 0 {
		t.Fatal("the process lost root")
	}
	refused, how, err = ProbeSigner(sock, 0, 0)
	if err != nil || refused {
		t.Fatalf("as root: refused %v, %q, %v", refused, how, err)
	}
}
