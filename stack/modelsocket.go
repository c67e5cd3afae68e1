package stack

import (
	"log/slog"
	"net/http"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/gateway/socket"
)

// modelSockets opens each job's model socket for the Worker.
type modelSockets struct{}

func (modelSockets) Open(h http.Handler, user string, conns int, log *slog.Logger) (dispatch.ModelSocket, error) {
	s, err := socket.Open(h, user, conns, log)
	if err != nil {
		return nil, err
	}
	return s, nil
}
