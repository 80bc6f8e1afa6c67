# Cairn. `make run` starts a one-process store; `make test` runs the suite.
GO ?= go
export PATH := $(PATH):$(shell $(GO) env GOPATH)/bin

.PHONY: run build test test-short deps proto fuzz bench

run:
	$(GO) run ./cmd/cairn server

build:
	CGO_ENABLED=0 $(GO) build -o bin/cairn ./cmd/cairn

# The suite needs, besides Go: fuse3 (fusermount3, the mount's tests),
# iproute2 (ip netns and veth: the cluster harness partitions a data server),
# iptables (inside a namespace: it cuts a meta's Raft traffic),
# awscli, rclone, s3fs and python3-boto3 (the S3 smoke tests run the real clients),
# chromium (the web console's browser tests), sqlite3 (two mounts sharing a
# database through the mount's distributed locks) and ca-certificates. `deps` installs the missing ones with apt (Debian, root);
# on a machine that has them all it changes nothing and asks no network.
DEB_PACKAGES := fuse3 iproute2 iptables awscli rclone s3fs chromium sqlite3 ca-certificates python3-boto3

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends $$missing; \
	fi

# The README's test command, and what .ci/run runs.
test: deps
	$(GO) test -count=1 -timeout 80m ./...

# The fast tier: no clusters of processes, mounts or long fault runs
# (those tests skip under -short); a couple of minutes.
test-short:
	$(GO) test -count=1 -short -timeout 10m ./...

# Regenerates proto/metapb from proto/meta.proto. Needs protoc (apt:
# protobuf-compiler) and the two Go plugins at the versions go.mod pins.
proto:
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
	protoc --go_out=. --go_opt=module=cairn --go-grpc_out=. --go-grpc_opt=module=cairn proto/meta.proto
