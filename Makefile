# Makefile for the silo extension (PGXS).
#
#   make            build the extension and tools/silo-worker
#   make install    install into the PostgreSQL found by PG_CONFIG (the
#                   worker goes to its bindir as silo-worker)
#   make test       install what is missing, build, run every suite
#   make test-cluster  the cluster TAP tests, long scenarios included
#   make demo       install what is missing, build, run a real demo
#   make demo-cluster  the same for cluster mode: etcd, three nodes, shards
#                   moving live under a workload (tools/demo-cluster.sh)
#   make stress     the long randomized stress run
#   make bench      the side-by-side benchmarks (bench/run.sh; not part of test)
#   make check-layers  calls between src/'s folders go down (also in make test)

EXTENSION = silo
MODULE_big = silo
# src/ is arranged by subsystem, one folder each (src/README.md has the
# layers and the calls each may make; "make check-layers" checks them).
SILO_LAYERS = module api bgw core cluster limits tenancy ipc storage util
OBJS = $(patsubst %.c,%.o,$(foreach d,$(SILO_LAYERS),$(wildcard src/$(d)/*.c)))
DATA = $(wildcard sql/silo--*.sql)
PGFILEDESC = "silo - durable multi-tenant job queue"

PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
PG_CPPFLAGS = -Isrc $(foreach d,$(SILO_LAYERS),-Isrc/$(d)) -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers
SHLIB_LINK =

EXTRA_CLEAN = tools/silo-worker

# "make test", "make demo" and the other script targets below run a script
# that installs the missing packages first (PGXS comes with
# postgresql-server-dev-15) and then runs make itself.  With only such goals
# this Makefile asks pg_config nothing, so that on a fresh machine their
# first line is the script's own, not an error about pg_config or PGXS.
SILO_SCRIPT_GOALS = test test-cluster demo demo-cluster stress bench
ifneq ($(MAKECMDGOALS),)
ifeq ($(filter-out $(SILO_SCRIPT_GOALS),$(MAKECMDGOALS)),)
SILO_SCRIPTS_ONLY = 1
endif
endif

ifndef SILO_SCRIPTS_ONLY
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifeq ($(wildcard $(PGXS)),)
$(error PGXS not found (PG_CONFIG=$(PG_CONFIG)): install postgresql-server-dev-15, or run "make test" or "make demo", which install what is missing first)
endif
include $(PGXS)

# PGXS tracks no header dependencies: a header change rebuilds everything.
$(OBJS): src/silo_errcodes.h $(foreach d,$(SILO_LAYERS),$(wildcard src/$(d)/*.h))

LIBPQ_CFLAGS = -I$(shell $(PG_CONFIG) --includedir)
LIBPQ_LIBS = -L$(shell $(PG_CONFIG) --libdir) -lpq -lpthread

# The reference worker: sources in tools/worker/, binary at tools/silo-worker.
SILO_WORKER_SRCS = $(sort $(wildcard tools/worker/*.c))

all: $(if $(SILO_WORKER_SRCS),tools/silo-worker)

tools/silo-worker: $(SILO_WORKER_SRCS) tools/worker/silo_worker.h
	$(CC) -O2 -g -std=gnu11 -Wall -Wextra -Werror $(LIBPQ_CFLAGS) -o $@ $(SILO_WORKER_SRCS) $(LIBPQ_LIBS)

install: $(if $(SILO_WORKER_SRCS),install-silo-worker)
uninstall: uninstall-silo-worker

.PHONY: install-silo-worker uninstall-silo-worker
install-silo-worker: tools/silo-worker
	$(MKDIR_P) '$(DESTDIR)$(bindir)'
	$(INSTALL_PROGRAM) tools/silo-worker '$(DESTDIR)$(bindir)/silo-worker'

uninstall-silo-worker:
	rm -f '$(DESTDIR)$(bindir)/silo-worker'

include mk/etcd.mk
include mk/coordinator.mk
include mk/siloctl.mk
endif # SILO_SCRIPTS_ONLY

.PHONY: test test-cluster demo demo-cluster stress bench check-layers
check-layers: all
	@tools/check-layers.sh && tools/check-layers.sh --selftest

test:
	@bash test/run.sh

# the cluster TAP tests with their long scenarios (017_cluster_long.pl
# skips itself in "make test")
test-cluster:
	@SILO_TESTS=tap:cluster SILO_CLUSTER_LONG=1 bash test/run.sh

demo:
	@bash tools/demo.sh

demo-cluster:
	@bash tools/demo-cluster.sh

stress:
	@SILO_STRESS=long bash test/run.sh

bench:
	@bash bench/run.sh
