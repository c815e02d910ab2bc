# mk/siloctl.mk: siloctl, the operator's command-line tool (tools/siloctl/).
#
# Included from the top-level Makefile after PGXS and mk/etcd.mk: adds
# tools/siloctl/siloctl to "all", installs it as $(bindir)/siloctl with
# "make install", removes it with "make uninstall", and "make clean"
# deletes it.  It also works on its own, from the top of
# the tree (it then includes mk/etcd.mk itself):
#
#   make -f mk/siloctl.mk               tools/siloctl/siloctl
#   make -f mk/siloctl.mk siloctl-clean
#
# siloctl is a plain C program: libpq (no PostgreSQL server header), the
# etcd client's objects (src/etcd/, built by mk/etcd.mk), libcurl and
# jansson.

PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config

ifndef ETCD_OBJS
# on its own: the default goal is siloctl, and the etcd objects' rules come
# from mk/etcd.mk
.DEFAULT_GOAL := siloctl-all
include $(dir $(lastword $(MAKEFILE_LIST)))etcd.mk
endif

SILOCTL := tools/siloctl/siloctl
SILOCTL_SRCS := $(sort $(wildcard tools/siloctl/*.c))
SILOCTL_HDRS := $(wildcard tools/siloctl/*.h)
SILOCTL_CFLAGS := -std=gnu11 -O2 -g -Wall -Wextra -Werror \
	-I$(shell $(PG_CONFIG) --includedir) -Isrc/etcd $(ETCD_PKG_CFLAGS)
SILOCTL_LIBS := -L$(shell $(PG_CONFIG) --libdir) -lpq $(ETCD_PKG_LIBS)

# PGXS defines these; on its own, the same from pg_config
bindir ?= $(shell $(PG_CONFIG) --bindir)
MKDIR_P ?= mkdir -p
INSTALL_PROGRAM ?= install -m 755

.PHONY: siloctl-all siloctl-clean install-siloctl uninstall-siloctl
siloctl-all: $(SILOCTL)

all: siloctl-all

$(SILOCTL): $(SILOCTL_SRCS) $(SILOCTL_HDRS) $(ETCD_OBJS) $(ETCD_HDRS)
	$(CC) $(SILOCTL_CFLAGS) -o $@ $(SILOCTL_SRCS) $(ETCD_OBJS) $(SILOCTL_LIBS)

install: install-siloctl
uninstall: uninstall-siloctl

install-siloctl: $(SILOCTL)
	$(MKDIR_P) '$(DESTDIR)$(bindir)'
	$(INSTALL_PROGRAM) $(SILOCTL) '$(DESTDIR)$(bindir)/siloctl'

uninstall-siloctl:
	rm -f '$(DESTDIR)$(bindir)/siloctl'

EXTRA_CLEAN += $(SILOCTL)

siloctl-clean:
	rm -f $(SILOCTL)
