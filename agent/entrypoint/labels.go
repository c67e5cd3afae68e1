package entrypoint

// Image labels the agent image carries (both the production Dockerfile in
// image/ and the offline build): what the image is and which parts of the
// container contract it implements, so an operator can check an image with
// `docker image inspect` before pointing PI_JOB_IMAGE at it.
const (
	LabelContract     = "dev.pidispatch.contract"
	LabelCapabilities = "dev.pidispatch.capabilities"
	LabelAgent        = "dev.pidispatch.agent"

	// ContractVersion is the container contract's version the entrypoint
	// speaks (docs/container-contract.md).
	ContractVersion = "1"
	// Capabilities: the exit line's detailed telemetry, the model socket,
	// the turn and cost limits, resumed sessions.
	Capabilities = "exit-telemetry-v2,model-socket,max-turns,max-cost,resume"
	// AgentPackage is the pinned agent (agent/image/package-lock.json).
	AgentPackage = "@earendil-works/pi-coding-agent@1.6.0"
)
