# syntax=docker/dockerfile:1
#
# The worker image: the worker (and the operator CLI) as static binaries on an
# empty base. The worker needs no shell: it starts job containers through the
# HOST's Docker daemon, whose socket is mounted in (deploy/docker-compose.yml).
#
#   docker build -t pi-dispatch-worker .
#   docker build --build-arg VERSION=1.2.3 -t pi-dispatch-worker:1.2.3 .

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
# Only the packages the binaries are built from, so a local .env (secrets)
# never enters the build context's layers.
COPY agent ./agent
COPY capabilities ./capabilities
COPY cmd ./cmd
COPY config ./config
COPY cronsync ./cronsync
COPY dispatch ./dispatch
COPY enqueue ./enqueue
COPY fingerprint ./fingerprint
COPY fleet ./fleet
COPY fleetstate ./fleetstate
COPY forge ./forge
COPY gateway ./gateway
COPY internal ./internal
COPY jobs ./jobs
COPY lease ./lease
COPY observe ./observe
COPY operator ./operator
COPY queue ./queue
COPY registry ./registry
COPY runner ./runner
COPY stack ./stack
COPY valkey ./valkey
ARG VERSION=dev
ENV CGO_ENABLED=0
RUN go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/pi-dispatch-worker ./cmd/worker \
 && go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/pi-dispatch ./cmd/pi-dispatch \
 && mkdir -p /out/tmp && chmod 1777 /out/tmp

FROM scratch
# rediss:// needs the CA roots; zone data is compiled into the worker.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
# os.TempDir for the worker's default jobs folder (set TMPDIR and PI_LOGS_DIR
# to host-visible paths in a deployment: see deploy/docker-compose.yml).
COPY --from=build /out/tmp /tmp
COPY --from=build /out/pi-dispatch-worker /out/pi-dispatch /usr/local/bin/
# Root in the container: the worker's one privilege is the Docker socket,
# which is root-equivalent on the host anyway.
ENTRYPOINT ["/usr/local/bin/pi-dispatch-worker"]
