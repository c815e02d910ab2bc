# mk/coordinator.mk: silo_coordinator.so, the cluster coordinator (src/coordinator/).
#
# Included from the top-level Makefile after mk/etcd.mk, so PGXS's variables
# (CC, CFLAGS, CFLAGS_SL, CPPFLAGS with PG_CPPFLAGS, LDFLAGS, pkglibdir,
# INSTALL_SHLIB, ...) and the etcd client's objects ($(ETCD_OBJS),
# $(ETCD_PKG_LIBS)) are known.  The coordinator is a library of its own,
# linked with the etcd client, libcurl, jansson and libpq, so that ordinary
# backends, which load only silo.so, never load libcurl.  Its references to
# silo.so's functions (silo_cluster_publish, ...) stay undefined here and
# resolve when the worker loads it: silo.so is preloaded with RTLD_GLOBAL.
#
#   make            also builds silo_coordinator.so
#   make install    installs it as $(pkglibdir)/silo_coordinator.so, which is
#                   what the worker's bgw_library_name "silo_coordinator"
#                   ($libdir/silo_coordinator) loads
#   make clean      removes it and its objects

COORD_SRCS := $(sort $(wildcard src/coordinator/*.c))
COORD_OBJS := $(COORD_SRCS:.c=.o)
COORD_HDRS := $(wildcard src/coordinator/*.h) src/cluster/silo_cluster.h \
	src/util/silo_util.h src/silo_errcodes.h src/etcd/etcd.h
COORD_LIB := silo_coordinator$(DLSUFFIX)

.PHONY: coordinator install-coordinator uninstall-coordinator
coordinator: $(COORD_LIB)

all: $(COORD_LIB)

src/coordinator/%.o: src/coordinator/%.c $(COORD_HDRS)
	$(CC) $(CFLAGS) $(CFLAGS_SL) $(CPPFLAGS) -Isrc/coordinator -Isrc/etcd \
		-I$(shell $(PG_CONFIG) --includedir) -c -o $@ $<

# --wrap=json_object: the postgres executable exports a json_object of its
# own, which would shadow jansson's (src/coordinator/jansson_wrap.c).
# libpq: the moves' SQL runs over a connection to the node itself
# (src/coordinator/moves_sql.c).
$(COORD_LIB): $(COORD_OBJS) $(ETCD_OBJS)
	$(CC) $(CFLAGS) $(CFLAGS_SL) -shared -o $@ $(COORD_OBJS) $(ETCD_OBJS) \
		$(LDFLAGS) $(LDFLAGS_SL) -Wl,--wrap=json_object $(ETCD_PKG_LIBS) \
		-L$(shell $(PG_CONFIG) --libdir) -lpq -ldl

install: install-coordinator
uninstall: uninstall-coordinator

install-coordinator: $(COORD_LIB)
	$(MKDIR_P) '$(DESTDIR)$(pkglibdir)'
	$(INSTALL_SHLIB) $(COORD_LIB) '$(DESTDIR)$(pkglibdir)/$(COORD_LIB)'

uninstall-coordinator:
	rm -f '$(DESTDIR)$(pkglibdir)/$(COORD_LIB)'

EXTRA_CLEAN += $(COORD_OBJS) $(COORD_LIB)
