# persyst — see README.md. Targets that start clusters or install packages need root.
GO      ?= go
NODES   ?= 2
BUILD   := build
BIN     := $(BUILD)/persyst
SPANK   := $(BUILD)/spank_persyst.so
LOAD    := $(BUILD)/persyst-workload
CORPUS  := $(BUILD)/persyst-corpus
NVML    := $(BUILD)/persyst-nvml
# The version persyst reports (persyst version) and its packages carry: git describe, or
# VERSION=... (a checkout without git history: "dev").
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Package versions must start with a digit (scripts/pkgversion.sh).
PKG_VERSION = $(shell scripts/pkgversion.sh '$(VERSION)')
LDFLAGS := -X main.version=$(VERSION)
GOFILES := $(shell find . \( -name '*.go' -o -name '*.conf' -o -name '*.strategy' \) -not -path './build/*') go.mod go.sum

.PHONY: package generate record-slurm fetch-spec all build deps cluster-up cluster-down cluster-status cluster-check run demo test test-here test-vm test-unit test-mariadb integration fresh-check bench clean

all: build

build: $(BIN) $(SPANK) $(LOAD) $(CORPUS) $(NVML)

$(BIN): $(GOFILES)
	@scripts/need.sh build
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $@ ./cmd/persyst

# Known workloads for the correctness tests and benchmarks.
$(LOAD): $(GOFILES)
	CGO_ENABLED=0 $(GO) build -trimpath -o $@ ./cmd/persyst-workload

# The workload corpus's programs, in C like the codes persyst watches.
$(CORPUS): cmd/persyst-workload/corpus/corpus.c
	@scripts/need.sh build
	mkdir -p $(BUILD)
	cc -O2 -Wall -Wextra -o $@ $< -lpthread

# The daemon's NVML helper, in C (nvml/helper.go says why): it loads the NVIDIA driver's
# libnvidia-ml.so.1 at run time, so it builds and runs on nodes without one.
$(NVML): nvml/helper/helper.c nvml/helper/nvmlapi.h
	@scripts/need.sh build
	mkdir -p $(BUILD)
	cc -O2 -g -Wall -Wextra -Werror -Wl,-z,relro -o $@ nvml/helper/helper.c -ldl

# The SPANK plugin is C only (spank/spank.go says why): no Go runtime in Slurm's processes.
SPANK_C := spank/plugin.c spank/options.c spank/client.c
$(SPANK): $(SPANK_C) spank/persyst.h spank/exports.map
	@scripts/need.sh build
	mkdir -p $(BUILD)
	cc -O2 -g -Wall -Wextra -Werror -fPIC -shared -Wl,-z,relro -Wl,--version-script=spank/exports.map -o $@ $(SPANK_C)

# The .deb and .rpm (build/package/): the binaries, the plugin in the distribution's Slurm
# plugin directory, a systemd unit per role, configuration files an upgrade keeps, a
# manual page per command (written from the commands' flags) and the docs.
# The plugin is built for one Slurm series (the headers here): the package's version says
# which (+slurm24.11), and it depends on that series' Slurm and conflicts with the next,
# so that a Slurm upgrade cannot leave a plugin slurmd skips (docs/admin.md).
package: build
	rm -rf $(BUILD)/package && mkdir -p $(BUILD)/package/man
	series=$$(scripts/slurmseries.sh) && next=$$(scripts/slurmseries.sh next) || exit 1; \
	echo "$$series $$next" >$(BUILD)/package/slurm-series
	$(BIN) man --dir $(BUILD)/package/man
	gzip -9n $(BUILD)/package/man/*.1
	sed 's|/usr/lib/x86_64-linux-gnu/slurm-wlm/|/usr/lib64/slurm/|' packaging/plugstack.conf.d-persyst.conf >$(BUILD)/package/plugstack-rpm.conf
	for p in deb rpm; do \
		read series next <$(BUILD)/package/slurm-series; \
		PERSYST_VERSION='$(PKG_VERSION)'+slurm$$series SLURM_SERIES=$$series SLURM_NEXT=$$next $(GO) tool nfpm package --config packaging/nfpm.yaml --packager $$p --target $(BUILD)/package/ || exit 1; \
	done
	@ls -l $(BUILD)/package/*.deb $(BUILD)/package/*.rpm

# Regenerate the slurmrestd client from the spec committed in jobmap/v0038 (fetched from
# the installed slurmrestd's /openapi/v3; `make fetch-spec` refreshes it from the test cluster).
generate:
	cd jobmap/v0038 && $(GO) tool oapi-codegen -config oapi-codegen.yaml openapi.json
	cd jobmap/v0042 && $(GO) tool oapi-codegen -config oapi-codegen.yaml openapi.json
	scripts/deps.sh --protoc
	mkdir -p $(BUILD)
	$(GO) build -o $(BUILD)/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	$(GO) build -o $(BUILD)/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc
	protoc --plugin=protoc-gen-go=$(BUILD)/protoc-gen-go --plugin=protoc-gen-go-grpc=$(BUILD)/protoc-gen-go-grpc \
		-I collectors/pb --go_out=collectors/pb --go_opt=paths=source_relative \
		--go-grpc_out=collectors/pb --go-grpc_opt=paths=source_relative collectors/pb/collector.proto

# Record this machine's Slurm's answers for the job map's tests (scripts/record-slurm.sh).
record-slurm: deps build
	scripts/record-slurm.sh

fetch-spec:
	. build/cluster/env && curl -sf --unix-socket "$${PERSYST_SLURMRESTD#unix:}" http://slurmrestd/openapi/v3 > jobmap/v0038/openapi.json

# Install what building and testing need (Debian packages), idempotently and quietly.
deps:
	scripts/deps.sh

cluster-up: build
	scripts/cluster.sh up $(NODES)

cluster-down:
	scripts/cluster.sh down

cluster-status:
	scripts/cluster.sh status

# Is everything the test cluster uses installed? (Starts nothing; names missing packages.)
cluster-check:
	scripts/cluster.sh check $(NODES)

# The main job: measure a command like a job (`make run CMD='./my_program args'`; without
# CMD, a short sample workload).
run: deps build
	scripts/run.sh $(CMD)

# A 2-node Slurm cluster with persyst: run jobs, show what the daemons measured.
demo: deps build
	scripts/demo.sh

# Every test: static checks and unit tests here, then all of them again with the
# integration tests against a real Slurm cluster, in a pristine Debian root after the
# README's set-up (fresh-check).
test: deps build
	scripts/test.sh

# Every test on this machine (the integration tests against a cluster here); faster, but a
# package installed here by hand can hide a missing install step.
test-here: deps build
	PERSYST_FRESH=0 scripts/test.sh

# The README's set-up and every test in a pristine Debian 12 root (scripts/fresh-check.sh).
fresh-check: deps
	scripts/fresh-check.sh

# persyst on a node as production runs it: a virtual machine with systemd and cgroup v2,
# Debian SUITE's Slurm (trixie: 24.11, forky: 26.05) and persyst's .deb (scripts/vm.sh).
SUITE ?= trixie
test-vm: deps
	SUITE=$(SUITE) scripts/vm.sh

test-unit:
	$(GO) test ./...

# The site store's tests on a private MariaDB server they start and stop (Debian's
# mariadb-server, which scripts/deps.sh installs): what `make test` runs in every root.
test-mariadb: deps
	PERSYST_TEST_STORE=mariadb $(GO) test -count=1 ./collectors/store/

# Integration tests on this machine's Slurm, RUN a test name pattern, e.g. in the pristine
# root of another Debian release: SUITE=trixie scripts/fresh-check.sh 'integration RUN=TestJobmap'
integration: deps build
	CI=1 PERSYST_INTEGRATION=1 $(GO) test -count=1 -v -timeout 20m -run '$(RUN)' ./integration/

bench: deps build
	bench/plugin_cost.sh
	bench/overhead.sh
	bench/daemon_load.sh
	bench/accounting.sh
	bench/peers.sh
	$(GO) test -run XXX -bench BenchmarkRead -benchtime 2000x ./daemon/measure/
	$(GO) test -run XXX -bench 'BenchmarkScrape32Jobs|BenchmarkDigestAccounting' ./daemon/
	$(GO) test -run XXX -bench BenchmarkCycle32Jobs -benchtime 300x ./daemon/
	$(GO) test -run XXX -bench 'CycleIngest' -benchtime 5x ./collectors/
	$(GO) test -run XXX -bench 'Render64x48x24h' -benchtime 3x ./htmlreport/

clean:
	-scripts/cluster.sh down
	rm -rf $(BUILD)
