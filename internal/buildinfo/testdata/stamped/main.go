// Command stamped prints its build as --version does: TestStampLinked builds it with
// compose/build.sh's -X flag.
package main

import (
	"fmt"

	"github.com/lockhttp/lockhttp/internal/buildinfo"
)

func main() { fmt.Println(buildinfo.Read().String()) }
