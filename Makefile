# Cairn. `make run` starts a one-process store; `make test` runs the suite.
GO ?= go
export PATH := $(PATH):$(shell $(GO) env GOPATH)/bin

.PHONY: run build test proto fuzz bench

run:
	$(GO) run ./cmd/cairn server

build:
	CGO_ENABLED=0 $(GO) build -o bin/cairn ./cmd/cairn

test:
	$(GO) test -count=1 -timeout 80m ./...

# Regenerates proto/metapb from proto/meta.proto. Needs protoc (apt:
# protobuf-compiler) and the two Go plugins at the versions go.mod pins.
proto:
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
	protoc --go_out=. --go_opt=module=cairn --go-grpc_out=. --go-grpc_opt=module=cairn proto/meta.proto
