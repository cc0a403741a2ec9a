package stack

import (
	"errors"

	"github.com/lockhttp/lockhttp/internal/signer"
)

// checkCA says whether the CA in caDir is to be created: only when the directory holds neither
// ca.pem nor ca-key.pem (a first start). Half a CA is an error that names the files and the fix
// (restore from the backup, or lockhttp ca init --replace): a new CA would break every agent that
// trusts the old one. Whether a key matches its certificate the signer checks when it loads them.
func checkCA(caDir string) (create bool, err error) {
	switch err := signer.CheckFiles(caDir); {
	case errors.Is(err, signer.ErrNoCA):
		return true, nil
	case err != nil:
		return false, err
	}
	return false, nil
}
