package registry_test

import (
	"fmt"

	"github.com/pidispatch/pidispatch/registry"
)

func ExampleSanitizeName() {
	fmt.Println(registry.SanitizeName("Robs-Mac-Mini.local"))
	fmt.Println(registry.SanitizeName("host.json"))
	fmt.Println(registry.SanitizeName("---"))
	// Output:
	// robs-mac-mini.local
	// host-json
	// worker
}

func ExampleValidateName() {
	fmt.Println(registry.ValidateName("mini1"))
	fmt.Println(registry.ValidateName("prod.json"))
	// Output:
	// <nil>
	// worker name "prod.json": name must not end in .json or .log
}
