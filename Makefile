# dlockd — GNU make build.
#
#   make            build the daemon, the CLI and the client library into $(BUILD)
#   make run        install missing packages, build, run dlockd in the foreground
#   make check      install missing packages, build, run every test
#   make bench      install missing packages, build, run the benchmark suite (under 5 min)
#                   into bench/results/<date>/ (see bench/README.md)
#   make check-compat  the redis backend's integration tests against Redis 8 and Valkey 8
#                   of Debian 13, in a chroot made once in $(BUILD)/compat (root, network),
#                   and the etcd backend's against Debian 13's etcd 3.5, gateway off
#   make install    PREFIX=/usr DESTDIR=... installs everything (the systemd units
#                   too when SYSTEMDUNITDIR is given, e.g. /lib/systemd/system)
#
# SAN=1 builds with AddressSanitizer and UndefinedBehaviorSanitizer into build/san.

VERSION    := 0.1.0
SOVERSION  := 1
# the shared library's own version: its file is libdlock.so.$(LIBVERSION)
LIBVERSION := $(SOVERSION).0.0
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
SBINDIR    ?= $(PREFIX)/sbin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR     ?= $(PREFIX)/share/man
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
# where make install puts systemd/*.service and *.socket; empty: nowhere
SYSTEMDUNITDIR ?=

ifeq ($(SAN),1)
BUILD      ?= build/san
SANFLAGS   := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
else
BUILD      ?= build
SANFLAGS   :=
endif

CC         ?= cc
WARNINGS   := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
              -Wpointer-arith -Wformat=2 -Wundef -Wvla -Wwrite-strings -Wcast-align \
              -Wnull-dereference -Wimplicit-fallthrough
CFLAGS     ?= -O2 -g
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE -DDLOCKD_VERSION='"$(VERSION)"' $(WARNINGS) $(SANFLAGS) \
              -MMD -MP $(CPPFLAGS) $(CFLAGS)
LDFLAGS    ?=
ALL_LDFLAGS := $(SANFLAGS) $(LDFLAGS)

PKGS_DAEMON := libevent libevent_openssl openssl yaml-0.1 hiredis libnghttp2 libprotobuf-c
# libsystemd (sd_notify, socket activation) when it is there, unless SYSTEMD=0:
# without it the daemon never notifies a service manager nor takes its sockets
SYSTEMD    ?= $(if $(shell pkg-config --exists libsystemd && echo y),1,0)
ifeq ($(SYSTEMD),1)
PKGS_DAEMON += libsystemd
CPPFLAGS_SYSTEMD := -DHAVE_LIBSYSTEMD
endif
CFLAGS_DAEMON = $(shell pkg-config --cflags $(PKGS_DAEMON)) $(CPPFLAGS_SYSTEMD) -I$(BUILD)/gen
LIBS_DAEMON   = $(shell pkg-config --libs $(PKGS_DAEMON))
CFLAGS_CHECK  = $(shell pkg-config --cflags check)
CFLAGS_BENCH  = $(shell pkg-config --cflags libevent)
LIBS_BENCH    = $(LIBS_DAEMON) -lm
LIBS_CHECK    = $(shell pkg-config --libs check)

# Debian packages: what building needs, and what the tests need on top.
DEB_BUILD := build-essential pkg-config libevent-dev libssl-dev libyaml-dev libhiredis-dev \
              libsystemd-dev libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler
# dpkg-dev, debhelper, fakeroot and lintian build and check the Debian packages;
# python3-yaml reads the Kubernetes example; openssl makes the TLS tests' certificates
DEB_CHECK := check redis-server redis-sentinel redis-tools etcd-server etcd-client python3 python3-redis valgrind \
              iproute2 openssl dpkg-dev debhelper fakeroot lintian python3-yaml $(DEB_NODE)
# Node and npm run the Node examples of docs/clients.md (their libraries come from npm at test
# time, into $(BUILD)/node); a Node installed otherwise (with its own npm) is kept.
DEB_NODE   := $(if $(shell command -v node 2>/dev/null),,nodejs) \
              $(if $(shell command -v npm 2>/dev/null),,npm)
# what make bench needs on top of building: the servers, the runner, the plots,
# openssl for the certificates of the redis-tls runs, and Go with etcd's client for
# etcd's own Election beside the election section's
DEB_BENCH := redis-server etcd-server python3 python3-redis gnuplot-nox openssl \
              golang-go golang-etcd-server-dev
# what make check-compat needs on top of building: debootstrap makes the chroot
# of the servers, the integration tests' runner wants the rest (etcd too)
DEB_COMPAT := debootstrap check python3 python3-redis redis-tools etcd-server etcd-client openssl

# common/ holds the sources the daemon, the client and the benchmark link: addresses,
# integers, the clock.
COMMON_SRC  := $(wildcard common/*.c)
COMMON_OBJ  := $(COMMON_SRC:%.c=$(BUILD)/%.o)
# the daemon's sources: daemon/ and its folders (a backend of several files has one)
DAEMON_SRC  := $(wildcard daemon/*.c daemon/*/*.c)
# where the daemon's headers are: every module includes its neighbours' by name
DAEMON_INC  := -Idaemon $(patsubst %/,-I%,$(sort $(dir $(wildcard daemon/*/*.h))))
# etcd's gRPC messages: C made by protoc-c from proto/etcd.proto at build time
GEN_SRC     := $(BUILD)/gen/etcd.pb-c.c
GEN_H       := $(GEN_SRC:.c=.h)
DAEMON_OBJ  := $(DAEMON_SRC:%.c=$(BUILD)/%.o) $(COMMON_OBJ) $(GEN_SRC:.c=.o)
DAEMON_LIB  := $(filter-out $(BUILD)/daemon/main.o,$(DAEMON_OBJ))
# the sources with test entry points (#ifdef DLOCKD_TEST_HOOKS): the tests link
# objects of their own of them, so that the installed dlockd carries none
HOOK_SRC    := daemon/etcd/be_etcd_recipe.c daemon/redis/be_redis.c daemon/conf.c \
               daemon/hashtab.c daemon/redis/rnode.c daemon/redis/rsettings.c
HOOK_OBJ    := $(HOOK_SRC:%.c=$(BUILD)/hooks/%.o)
TEST_LIB    := $(filter-out $(HOOK_SRC:%.c=$(BUILD)/%.o),$(DAEMON_LIB)) $(HOOK_OBJ)
CLIENT_SRC  := client/dlock.c client/dlock_elect.c client/dlock_multi.c
CLIENT_OBJ  := $(CLIENT_SRC:%.c=$(BUILD)/%.o) $(COMMON_OBJ)
CLIENT_PIC  := $(CLIENT_SRC:%.c=$(BUILD)/%.pic.o) $(COMMON_OBJ)
CLI_OBJ     := $(BUILD)/client/dlock_cli.o $(BUILD)/client/dlock_cli_elect.o \
               $(BUILD)/client/dlock_cli_multi.o
# the benchmark's load generator: its own sources, the parsers of common/, and
# for its direct-etcd mode the daemon's etcd client (daemon/etcd/etcd.c) with
# what it needs, taken by the linker from an archive of the daemon's modules
BENCH_SRC   := $(wildcard bench/*.c)
BENCH_OBJ   := $(BENCH_SRC:%.c=$(BUILD)/%.o) $(BUILD)/common/addr.o $(BUILD)/common/num.o
BENCH_LIB   := $(BUILD)/bench/libdaemon.a
BENCH_BIN   := $(BUILD)/dlock-bench
TEST_SRC    := $(wildcard tests/check_*.c)
TEST_BIN    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
# libdlock's suites: they need a daemon, so tests/integration/run.sh runs them
LIVE_TEST_BIN := $(BUILD)/tests/check_dlock $(BUILD)/tests/check_dlock_elect
# tests/*.c that are not suites (fakes, helpers), as an archive every suite
# links: a suite takes those it uses (the etcd suites' fixtures bring the
# etcd client, the others do without)
TEST_HELP_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(filter-out $(TEST_SRC),$(wildcard tests/*.c)))
TEST_HELP   := $(BUILD)/tests/libhelp.a

PROGS := $(BUILD)/dlockd $(BUILD)/dlock $(BUILD)/libdlock.so $(BUILD)/libdlock.a $(BUILD)/libdlock.pc

.PHONY: all run check check-valgrind check-faults check-compat unit integration bench deps \
        deps-check deps-bench deps-compat deps-fuzz fuzz install clean FORCE
all: $(PROGS)

# The install directories the build bakes in (libdlock.pc, dlockd's default
# configuration file). The stamp is rewritten, and what depends on it rebuilt,
# only when one of them changes: make install PREFIX=... after a plain make
# rebuilds those with the PREFIX given.
DIRS := PREFIX=$(PREFIX) LIBDIR=$(LIBDIR) INCLUDEDIR=$(INCLUDEDIR) SYSCONFDIR=$(SYSCONFDIR)
$(BUILD)/dirs.stamp: FORCE
	@mkdir -p $(@D)
	@echo '$(DIRS)' | cmp -s - $@ || echo '$(DIRS)' > $@
FORCE:

$(BUILD)/daemon/main.o: $(BUILD)/dirs.stamp
$(BUILD)/daemon/main.o: ALL_CFLAGS += -DDEFAULT_CONF='"$(SYSCONFDIR)/dlockd/dlockd.yaml"'

# common/ objects go into the daemon and into both flavours of libdlock.
$(BUILD)/common/%.o: common/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -fvisibility=hidden -fPIC -c $< -o $@

$(GEN_SRC) $(GEN_H) &: proto/etcd.proto
	@mkdir -p $(@D)
	protoc-c --c_out=$(@D) --proto_path=proto $<

$(GEN_SRC:.c=.o): $(GEN_SRC)
	$(CC) $(ALL_CFLAGS) $(CFLAGS_DAEMON) -c $< -o $@

$(BUILD)/daemon/%.o: daemon/%.c | $(GEN_H)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Icommon $(DAEMON_INC) $(CFLAGS_DAEMON) -c $< -o $@

$(BUILD)/hooks/daemon/%.o: daemon/%.c | $(GEN_H)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -DDLOCKD_TEST_HOOKS -Icommon $(DAEMON_INC) $(CFLAGS_DAEMON) -c $< -o $@

$(BUILD)/client/%.o: client/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Icommon -fvisibility=hidden -c $< -o $@

$(BUILD)/client/%.pic.o: client/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Icommon -fvisibility=hidden -fPIC -c $< -o $@

$(BUILD)/bench/%.o: bench/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Icommon $(CFLAGS_BENCH) -c $< -o $@

# the direct-etcd mode's requests are made with the daemon's client and messages
$(BUILD)/bench/etcd_direct.o: bench/etcd_direct.c | $(GEN_H)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Icommon $(DAEMON_INC) $(CFLAGS_DAEMON) -c $< -o $@

$(BUILD)/tests/%.o: tests/%.c | $(GEN_H)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(DAEMON_INC) -Iclient -Icommon -Ibench $(CFLAGS_DAEMON) $(CFLAGS_CHECK) -c $< -o $@

$(BUILD)/dlockd: $(DAEMON_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS_DAEMON)

$(BUILD)/libdlock.a: $(CLIENT_OBJ)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/libdlock.so: $(CLIENT_PIC)
	$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,libdlock.so.$(SOVERSION) -o $@.$(LIBVERSION) $^
	ln -sf libdlock.so.$(LIBVERSION) $@.$(SOVERSION)
	ln -sf libdlock.so.$(SOVERSION) $@

$(BUILD)/libdlock.pc: client/libdlock.pc.in Makefile $(BUILD)/dirs.stamp
	@mkdir -p $(@D)
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g' $< > $@

$(BUILD)/dlock: $(CLI_OBJ) $(BUILD)/libdlock.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^

$(BENCH_BIN): $(BENCH_OBJ) $(BENCH_LIB)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS_BENCH)

$(BENCH_LIB): $(DAEMON_LIB)
	@mkdir -p $(@D)
	rm -f $@
	ar rcs $@ $^

# The daemon's modules but main, as an archive, with the test entry points:
# a test links what it uses.
$(BUILD)/libdlockd.a: $(TEST_LIB)
	rm -f $@
	ar rcs $@ $^

$(TEST_HELP): $(TEST_HELP_OBJ)
	rm -f $@
	ar rcs $@ $^

# Every unit-test suite links the daemon's modules and libdlock, after the
# objects a suite names of its own (which the archives then do not repeat).
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_HELP) $(BUILD)/libdlockd.a $(BUILD)/libdlock.a
	$(CC) $(ALL_LDFLAGS) -o $@ $(filter-out %.a,$^) $(filter %.a,$^) $(LIBS_DAEMON) $(LIBS_CHECK)

# dlock-bench's histogram and reply reader have a suite each.
$(BUILD)/tests/check_hist: $(BUILD)/bench/hist.o
$(BUILD)/tests/check_reply: $(BUILD)/bench/reply.o $(BUILD)/common/num.o

# Install the Debian packages that are missing (root runs apt-get, others use sudo).
deps:
	@DEB="$(DEB_BUILD)" sh tests/deps.sh
deps-check:
	@DEB="$(DEB_BUILD) $(DEB_CHECK)" sh tests/deps.sh
deps-bench:
	@DEB="$(DEB_BUILD) $(DEB_BENCH)" sh tests/deps.sh
deps-compat:
	@DEB="$(DEB_BUILD) $(DEB_COMPAT)" sh tests/deps.sh

run: deps
	$(MAKE) all
	$(BUILD)/dlockd -c conf/dlockd.yaml -l 127.0.0.1:7480 -l unix:$(CURDIR)/$(BUILD)/dlockd.sock

# The install and Debian package tests run in the normal build only.
check: deps-check
	$(MAKE) all $(TEST_BIN) $(BENCH_BIN)
	BUILD=$(BUILD) SAN=$(SAN) PACKAGING=$(if $(filter 1,$(SAN)),0,1) sh tests/run.sh $(TEST_BIN)

# The unit suites, and the integration tests that exercise memory handling
# (tests/integration/runtests.py names them), with every daemon under valgrind.
check-valgrind: deps-check
	$(MAKE) all $(TEST_BIN) $(BENCH_BIN)
	BUILD=$(BUILD) VALGRIND=1 sh tests/run.sh $(TEST_BIN)

# The long safety test: every backend x fault, several rounds (minutes).
check-faults: deps-check
	$(MAKE) all
	BUILD=$(BUILD) sh tests/faults/run.sh --long

unit: all $(TEST_BIN)
	BUILD=$(BUILD) UNIT_ONLY=1 sh tests/run.sh $(TEST_BIN)

integration: all $(LIVE_TEST_BIN) $(BENCH_BIN)
	BUILD=$(BUILD) sh tests/integration/run.sh

# The redis, redis-cluster and redlock backends' integration tests (-k
# test_redis -k TestLocksRedis -k test_redlock -k TestLocksRedlock) against
# redis-server 8 and valkey-server 8 of Debian 13, run from a chroot that
# tests/compat/setup.sh makes once in $(BUILD)/compat with debootstrap
# (root, Debian's mirror); COMPAT_SERVERS and COMPAT_TESTS choose others
# (tests/compat/run.sh). Then the etcd backend's (-k test_etcd -k TestLocksEtcd)
# against etcd 3.5 of Debian 13 with its JSON gateway off, fetched once into
# $(BUILD)/compat/etcd (tests/compat/etcd35.sh; COMPAT_ETCD_TESTS chooses others).
check-compat: deps-compat
	$(MAKE) all $(LIVE_TEST_BIN) $(BENCH_BIN)
	BUILD=$(BUILD) sh tests/compat/run.sh; s=$$?; \
	BUILD=$(BUILD) sh tests/compat/etcd35.sh || s=1; exit $$s

# The benchmark suite: its own servers and daemons on loopback, a few minutes.
# BENCH_ARGS passes options to bench/run.py (e.g. BENCH_ARGS="--only memory");
# it finds the tests' Python library (tests/dlocktest) through PYTHONPATH.
bench: deps-bench
	$(MAKE) all $(BENCH_BIN)
	BUILD=$(BUILD) PYTHONPATH=$(CURDIR)/tests /usr/bin/python3 bench/run.py $(BENCH_ARGS)

install: all
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig \
	    $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 \
	    $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(SYSCONFDIR)/dlockd
	install -m 0755 $(BUILD)/dlockd $(DESTDIR)$(SBINDIR)/dlockd
	install -m 0755 $(BUILD)/dlock $(DESTDIR)$(BINDIR)/dlock
	install -m 0644 $(BUILD)/libdlock.a $(DESTDIR)$(LIBDIR)/libdlock.a
	install -m 0644 $(BUILD)/libdlock.so.$(LIBVERSION) $(DESTDIR)$(LIBDIR)/libdlock.so.$(LIBVERSION)
	ln -sf libdlock.so.$(LIBVERSION) $(DESTDIR)$(LIBDIR)/libdlock.so.$(SOVERSION)
	ln -sf libdlock.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libdlock.so
	install -m 0644 $(BUILD)/libdlock.pc $(DESTDIR)$(LIBDIR)/pkgconfig/libdlock.pc
	install -m 0644 client/dlock.h $(DESTDIR)$(INCLUDEDIR)/dlock.h
	install -m 0644 client/dlock.1 $(DESTDIR)$(MANDIR)/man1/dlock.1
	install -m 0644 conf/dlockd.yaml.5 $(DESTDIR)$(MANDIR)/man5/dlockd.yaml.5
	install -m 0644 daemon/dlockd.8 $(DESTDIR)$(MANDIR)/man8/dlockd.8
	test -e $(DESTDIR)$(SYSCONFDIR)/dlockd/dlockd.yaml || \
	    install -m 0644 conf/dlockd.yaml $(DESTDIR)$(SYSCONFDIR)/dlockd/dlockd.yaml
ifneq ($(SYSTEMDUNITDIR),)
	install -d $(DESTDIR)$(SYSTEMDUNITDIR)
	for u in $(wildcard systemd/*.service systemd/*.socket); do \
	    sed -e 's|/usr/sbin/dlockd|$(SBINDIR)/dlockd|g' -e 's|/etc/dlockd/|$(SYSCONFDIR)/dlockd/|g' \
	        $$u > $(DESTDIR)$(SYSTEMDUNITDIR)/$${u##*/} && \
	    chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/$${u##*/} || exit 1; \
	done
endif

# ---- fuzzing -------------------------------------------------------------------
# make fuzz [FUZZ_SECONDS=n] builds each harness tests/fuzz/NAME.c with clang and
# libFuzzer (ASan and UBSan) into $(BUILD)/fuzz/, its own objects of the daemon's
# sources in $(BUILD)/fuzz/obj/, and runs each for n seconds on a scratch copy of
# tests/fuzz/corpus/NAME/ and tests/fuzz/regress/NAME/ (tests/fuzz/run.sh). It
# fails on a crash, a leak or a timeout, leaving the input in $(BUILD)/fuzz/.
# make check replays both directories through each harness linked with
# tests/fuzz/replay.c by the normal compiler ($(BUILD)/tests/fuzz/replay-NAME).
FUZZ_SECONDS ?= 60
FUZZ_CC      := clang
DEB_FUZZ     := clang libclang-rt-14-dev
FUZZ_NAMES   := $(filter-out replay,$(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/*.c)))
FUZZ_DIR     := $(BUILD)/fuzz
FUZZ_BINS    := $(FUZZ_NAMES:%=$(FUZZ_DIR)/%)
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS  := -std=c11 -D_GNU_SOURCE -DDLOCKD_VERSION='"$(VERSION)"' -DDLOCKD_TEST_HOOKS \
                $(filter-out -Werror,$(WARNINGS)) -O1 -g -MMD -MP \
                -fsanitize=fuzzer-no-link $(FUZZ_SAN)
FUZZ_INC     := $(DAEMON_INC) -Iclient -Icommon -Itests -Itests/fuzz $(CFLAGS_DAEMON) $(CFLAGS_CHECK)
FUZZ_LIBOBJ  := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(filter-out daemon/main.c,$(DAEMON_SRC)) \
                $(COMMON_SRC) $(CLIENT_SRC) tests/fake_backend.c) \
                $(FUZZ_DIR)/obj/$(GEN_SRC:.c=.o)
FUZZ_REPLAY  := $(FUZZ_NAMES:%=$(BUILD)/tests/fuzz/replay-%)
# make check and make unit build and run the replays with the unit suites
TEST_BIN     += $(FUZZ_REPLAY)
unit: $(FUZZ_REPLAY)

$(FUZZ_DIR)/obj/%.o: %.c | $(GEN_H)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_INC) -c $< -o $@

$(FUZZ_BINS): $(FUZZ_DIR)/%: $(FUZZ_DIR)/obj/tests/fuzz/%.o $(FUZZ_LIBOBJ)
	$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $^ $(LIBS_DAEMON) $(LIBS_CHECK)

$(FUZZ_REPLAY): $(BUILD)/tests/fuzz/replay-%: $(BUILD)/tests/fuzz/%.o \
                $(BUILD)/tests/fuzz/replay.o $(TEST_HELP) $(BUILD)/libdlockd.a $(BUILD)/libdlock.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS_DAEMON) $(LIBS_CHECK)

$(BUILD)/tests/fuzz/%.o: tests/fuzz/%.c | $(GEN_H)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(DAEMON_INC) -Iclient -Icommon -Itests $(CFLAGS_DAEMON) $(CFLAGS_CHECK) \
	    -c $< -o $@

# building the harnesses needs Check too (the lock table's links the fake backend)
deps-fuzz:
	@DEB="$(DEB_BUILD) check $(DEB_FUZZ)" sh tests/deps.sh

fuzz: deps-fuzz
	$(MAKE) $(FUZZ_BINS)
	BUILD=$(BUILD) sh tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_NAMES)

-include $(wildcard $(FUZZ_DIR)/obj/*/*.d $(FUZZ_DIR)/obj/*/*/*.d $(BUILD)/tests/fuzz/*.d)

clean:
	rm -rf build

-include $(wildcard $(BUILD)/*/*.d $(BUILD)/*/*/*.d $(BUILD)/hooks/daemon/*.d \
    $(BUILD)/hooks/daemon/*/*.d)
