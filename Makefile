# roomflow — see README.md. `make test` is the CI entry point.
GO ?= go
PROTOC_GEN_GO_VERSION := v1.36.12
PROTO_FILES := $(shell find schemas/proto -name '*.proto' | sort)
GOBIN := $(shell $(GO) env GOPATH)/bin
TEST_TIMEOUT ?= 14m

.PHONY: build test unit lint proto proto-tools bench demo

build:
	$(GO) build -o bin/roomflow ./cmd/roomflow

## test: unit + integration (MariaDB on 127.0.0.1:3306, in-process kfake).
test: lint
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -p 2 ./...

unit:
	$(GO) test -count=1 -short ./...

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

proto-tools:
	GOBIN=$(GOBIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

## proto: regenerate schemas/*v1 from schemas/proto with the pinned protoc-gen-go.
proto: proto-tools
	PATH=$(GOBIN):$$PATH protoc -I schemas/proto --go_out=. --go_opt=module=github.com/hyapp/roomflow $(PROTO_FILES)

bench:
	./benchmarks/run.sh

demo: build
	./bin/roomflow demo
