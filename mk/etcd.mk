# mk/etcd.mk: the etcd client library (src/etcd/) and its test driver.
#
# Included from the top-level Makefile after PGXS, which adds the test
# driver to "all" and the objects to "make clean".  It also works on its
# own, from the top of the tree (say, while the extension itself does not
# build):
#
#   make -f mk/etcd.mk             library objects and test/etcd/etcd_client_test
#   make -f mk/etcd.mk etcd-asan   test/etcd/etcd_client_test.asan, the driver
#                                  built with AddressSanitizer + UBSan (the TAP
#                                  test uses it when SILO_ETCD_DRIVER names it)
#   make -f mk/etcd.mk etcd-clean
#
# The objects are position-independent so that they can go into a shared
# library (the coordinator's) as well as into programs (siloctl).  Nothing
# here uses PostgreSQL's flags or headers: only libcurl, jansson and libc.

ETCD_SRCS := $(sort $(wildcard src/etcd/*.c))
ETCD_OBJS := $(ETCD_SRCS:.c=.o)
ETCD_HDRS := $(wildcard src/etcd/*.h)
ETCD_DRIVER := test/etcd/etcd_client_test
ETCD_DRIVER_SRC := test/etcd/etcd_client_test.c

ETCD_PKG_CFLAGS := $(shell pkg-config --cflags libcurl jansson 2>/dev/null)
ETCD_PKG_LIBS := $(or $(shell pkg-config --libs libcurl jansson 2>/dev/null),-lcurl -ljansson)
ETCD_WARN := -Wall -Wextra -Werror
ETCD_CFLAGS := -std=gnu11 -O2 -g -fPIC $(ETCD_WARN) $(ETCD_PKG_CFLAGS)
ETCD_ASAN_CFLAGS := -std=gnu11 -O1 -g -fno-omit-frame-pointer \
	-fsanitize=address,undefined -fno-sanitize-recover=undefined \
	$(ETCD_WARN) $(ETCD_PKG_CFLAGS)

.PHONY: etcd-all etcd-asan etcd-clean
etcd-all: $(ETCD_DRIVER)

# "all" is PGXS's default target when included; the first one above when not
all: etcd-all

# Should the extension's OBJS ever glob src/*/*.c, keep the client out of it:
# it must never be linked into silo.so (backends must not load libcurl).
OBJS := $(filter-out src/etcd/%,$(OBJS))

src/etcd/%.o: src/etcd/%.c $(ETCD_HDRS)
	$(CC) $(ETCD_CFLAGS) -c -o $@ $<

$(ETCD_DRIVER): $(ETCD_DRIVER_SRC) $(ETCD_OBJS) $(ETCD_HDRS)
	$(CC) $(ETCD_CFLAGS) -Isrc/etcd -o $@ $(ETCD_DRIVER_SRC) $(ETCD_OBJS) $(ETCD_PKG_LIBS)

etcd-asan: $(ETCD_DRIVER).asan

$(ETCD_DRIVER).asan: $(ETCD_DRIVER_SRC) $(ETCD_SRCS) $(ETCD_HDRS)
	$(CC) $(ETCD_ASAN_CFLAGS) -Isrc/etcd -o $@ $(ETCD_DRIVER_SRC) $(ETCD_SRCS) $(ETCD_PKG_LIBS)

EXTRA_CLEAN += $(ETCD_OBJS) $(ETCD_DRIVER) $(ETCD_DRIVER).asan

etcd-clean:
	rm -f $(ETCD_OBJS) $(ETCD_DRIVER) $(ETCD_DRIVER).asan
