package main

import "strings"

// defaultCLIBin is where the pi-dispatch binary is installed; the receiver
// unit runs its receive command.
const defaultCLIBin = "/usr/local/bin/pi-dispatch"

// renderReceiverUnit is the forge receiver's systemd unit (pi-dispatch
// receive). It needs no docker group: it only reads the triggers file,
// writes a one-shot trigger's disarm back to it, talks to Valkey and the
// forges' APIs, and listens on RECEIVER_PORT. Exit 2 (an invalid
// configuration or triggers file) is not restarted. The deployment folder
// stays writable (ReadWritePaths) because a one-shot trigger is disarmed in
// triggers.json there.
func renderReceiverUnit(dir, bin, user string) string {
	var b strings.Builder
	w := func(s string) { b.WriteString(s + "\n") }
	w("# pidispatch forge receiver: forge webhooks and the GitHub poller become jobs.")
	w("# Rendered by: pi-dispatch service render --receiver --dir " + dir)
	w("# Install: copy to /etc/systemd/system/pi-dispatch-receiver.service, then")
	w("#   systemctl daemon-reload && systemctl enable --now pi-dispatch-receiver")
	if user != "" {
		w("# The user must exist: useradd --system --home-dir " + dir + " " + user)
	}
	w("")
	w("[Unit]")
	w("Description=pidispatch forge receiver (" + dir + ")")
	w("Wants=network-online.target")
	w("After=network-online.target")
	w("")
	w("[Service]")
	w("Type=simple")
	if user != "" {
		w("User=" + user)
	}
	w("WorkingDirectory=" + dir)
	w("EnvironmentFile=" + dir + "/.env")
	w("ExecStart=" + bin + " receive")
	w("Restart=on-failure")
	w("RestartSec=5")
	w("RestartPreventExitStatus=2")
	w("KillSignal=SIGTERM")
	w("TimeoutStopSec=30")
	w("NoNewPrivileges=yes")
	w("ProtectSystem=strict")
	w("ReadWritePaths=" + dir)
	w("PrivateTmp=yes")
	w("PrivateDevices=yes")
	w("ProtectHome=yes")
	w("ProtectKernelTunables=yes")
	w("ProtectKernelModules=yes")
	w("ProtectControlGroups=yes")
	w("RestrictSUIDSGID=yes")
	w("RestrictNamespaces=yes")
	w("LockPersonality=yes")
	w("MemoryDenyWriteExecute=yes")
	w("CapabilityBoundingSet=")
	w("")
	w("[Install]")
	w("WantedBy=multi-user.target")
	return b.String()
}
