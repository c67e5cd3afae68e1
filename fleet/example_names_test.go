package fleet_test

import (
	"fmt"

	"github.com/pidispatch/pidispatch/fleet"
)

func ExampleSanitizeName() {
	fmt.Println(fleet.SanitizeName("Robs-Mac-Mini.local"))
	fmt.Println(fleet.SanitizeName("host.json"))
	fmt.Println(fleet.SanitizeName("---"))
	// Output:
	// robs-mac-mini.local
	// host-json
	// worker
}

func ExampleValidateName() {
	fmt.Println(fleet.ValidateName("mini1"))
	fmt.Println(fleet.ValidateName("prod.json"))
	// Output:
	// <nil>
	// worker name "prod.json": name must not end in .json or .log
}
