# roomflow — see README.md and docs/. `make test` is the CI entry point.
GO ?= go
PROTO_FILES := $(shell find schemas/proto -name '*.proto' | sort)
TEST_TIMEOUT ?= 14m

CHAOS_DURATION ?= 10m

.PHONY: build test unit lint proto proto-tools buf-baseline buf-breaking-demo bench bench-compare demo chaos mutate

## build: bin/roomflow stamped with the release (`roomflow --version`,
## roomflow_build_info): VERSION from git describe, REVISION the commit.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILDINFO := github.com/hyapp/roomflow/internal/buildinfo
LDFLAGS := -X $(BUILDINFO).Version=$(VERSION) -X $(BUILDINFO).Revision=$(REVISION)
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/roomflow ./cmd/roomflow

## test: unit + integration (MariaDB on 127.0.0.1:3306, in-process kfake), in a
## shuffled order (order dependence fails here; the seed is printed: -shuffle=SEED).
## Its 2-minute pipeline chaos run replays one fault schedule, CHAOS_TEST_SEED,
## so CI judges the change and not the draw; `make chaos` draws new schedules
## (docs/reliability.md lists the open findings). CHAOS_TEST_SEED= draws one.
CHAOS_TEST_SEED ?= 574199634
## deploy/ is a module of its own (the deployment tests and their
## libraries: kustomize, k8s.io, compose-go, Prometheus); test, unit and
## lint run in both modules.
test: lint
	ROOMFLOW_CHAOS_SEED=$(CHAOS_TEST_SEED) $(GO) test -count=1 -shuffle=on -timeout $(TEST_TIMEOUT) -p 2 ./...
	cd deploy && $(GO) test -count=1 -shuffle=on -timeout $(TEST_TIMEOUT) -p 2 ./...

## chaos: the pipeline chaos run (docs/reliability.md; package chaos builds
## the roomflow binary and runs its commands as child processes), 10 minutes of seeded faults
## by default; CHAOS_SEED=<n> replays a run, CHAOS_DURATION=2m is make test's profile.
## CHAOS_RELAY_MODE=binlog runs the relay in binlog mode on a throwaway MariaDB.
CHAOS_RELAY_MODE ?= poll
chaos:
	ROOMFLOW_CHAOS_DURATION=$(CHAOS_DURATION) ROOMFLOW_CHAOS_SEED=$(CHAOS_SEED) ROOMFLOW_CHAOS_RELAY_MODE=$(CHAOS_RELAY_MODE) \
	  $(GO) test -count=1 -v -timeout 60m -run '^TestPipelineChaos$$' ./chaos/

unit:
	$(GO) test -count=1 -short ./...
	cd deploy && $(GO) test -count=1 -short ./...

## lint: go vet and gofmt in both modules, then buf v1.75.0 (bin/buf, not
## in go.mod): buf lint of schemas/proto (buf.yaml lists the excepted rules
## and why) and buf breaking against the last release's
## schemas/baseline.binpb (category FILE), so a renumbered, retyped or
## removed field fails here. BUF=... uses another buf.
BUF ?= bin/buf
lint: $(BUF)
	$(GO) vet ./...
	cd deploy && $(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(BUF) lint
	$(BUF) breaking --against schemas/baseline.binpb

## bin/buf: buf v1.75.0, the prebuilt binary npm's @bufbuild/buf ships
## (seconds); without npm, built from source with go install (minutes).
BUF_VERSION := 1.75.0
bin/buf:
	@mkdir -p bin
	if command -v npm >/dev/null 2>&1; then \
	  npm install --silent --no-save --no-audit --no-fund --prefix bin/.buf @bufbuild/buf@$(BUF_VERSION) && \
	  ln -sf "$$(pwd)/bin/.buf/node_modules/.bin/buf" bin/buf; \
	else GOBIN="$$(pwd)/bin" $(GO) install github.com/bufbuild/buf/cmd/buf@v$(BUF_VERSION); fi
	bin/buf --version

## buf-baseline: the release step that moves the breaking-change baseline to
## this release's schemas (docs/operations.md, "Protobuf schemas"); commit
## schemas/baseline.binpb with the release.
buf-baseline: $(BUF)
	$(BUF) build --exclude-source-info -o schemas/baseline.binpb

## buf-breaking-demo: a renumbered field in a copy of schemas/proto is
## refused by buf breaking, with buf's message.
buf-breaking-demo: $(BUF)
	BUF="$(BUF)" ./scripts/buf-breaking-demo.sh

## proto-tools: protoc-gen-go and protoc-gen-go-grpc at the versions go.mod pins
## (google.golang.org/protobuf, and the `tool` line for protoc-gen-go-grpc).
proto-tools:
	$(GO) build -o bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	$(GO) build -o bin/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc

## proto: regenerate schemas/*v1 and the descriptor set schemas/roomflow.protoset
## from schemas/proto (protoc from Debian's protobuf-compiler).
proto: proto-tools
	protoc --plugin=protoc-gen-go=bin/protoc-gen-go --plugin=protoc-gen-go-grpc=bin/protoc-gen-go-grpc \
	  -I schemas/proto --go_out=. --go_opt=module=github.com/hyapp/roomflow \
	  --go-grpc_out=. --go-grpc_opt=module=github.com/hyapp/roomflow \
	  --include_imports --descriptor_set_out=schemas/roomflow.protoset $(PROTO_FILES)

bench:
	./benchmarks/run.sh

## bench-compare: two builds (BASE=<git ref> against the working tree) or
## two modes of the working tree (A_ARGS=... B_ARGS=...) through the stage
## benchmarks, interleaved A B A B on this machine, as one table with B/A
## and the changes the rounds can tell from noise flagged. BENCH=lucky,mic
## selects, ROUNDS=n (>= 2) sets the rounds, ARGS=... adds flags to both
## sides, OUT=dir places the report. docs/performance.md tells more.
bench-compare:
	BASE="$(BASE)" BENCH="$(BENCH)" ROUNDS="$(ROUNDS)" ARGS="$(ARGS)" A_ARGS="$(A_ARGS)" B_ARGS="$(B_ARGS)" OUT="$(OUT)" ./benchmarks/compare.sh

## mutate: mutation testing (gremlins v0.6.0) of the exactly-once files, each
## against the tests that cover it; not part of make test (tens of minutes,
## docs/reliability.md "Mutation testing"). MUTATE_FILES=a.go b.go limits it,
## MUTATE_WORKERS=n runs mutants in parallel (default 1).
MUTATE_FILES ?=
mutate:
	./scripts/mutate.sh $(MUTATE_FILES)

demo: build
	./bin/roomflow demo
