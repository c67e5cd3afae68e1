// Command prog prints buildinfo.Version for the test of package buildinfo.
package main

import (
	"fmt"

	"github.com/pidispatch/pidispatch/internal/buildinfo"
)

var version = "dev"

func main() { fmt.Println(buildinfo.Version(version)) }
