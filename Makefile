# SPDX-License-Identifier: GPL-2.0
#
# ferrdma: an emulated E810-class RoCEv2 RDMA NIC (tools/ferrdma-nic) and its Rust ib_device
# driver (drivers/infiniband/hw/ferrdma), tested in QEMU VMs with stock rdma-core tools.
#
#   make run     boot VMs with ferrdma NICs on one fabric and run the demo
#   make check   all tests: device-model unit tests, kernel build, KUnit and VM tests
#   make bench   ferrdma vs rxe on the same two VMs, and the host's memcpy: table, CSV, plots
#   make incast  N senders to one receiver, lossy, PFC and DCQCN: time series CSV and a PNG
#   make fuzz-uverbs   the uverbs fuzzer, long: FUZZ_COMMANDS (1000000) with FUZZ_SEED (fresh)
#   make fuzz-nic      the device model's long fuzz run: FUZZ_OPS hostile operations (2000000)
#   make check-kasan   the driver-heavy VM tests on the KASAN kernel (~25 min, and ~20 min
#                      more for its kernel when cold)
#   make check-long    the long suites, outside make check's budget (~17-25 min, measured:
#                      every limit at the nominal resource profile; two fabrics in two
#                      network namespaces joined by a bridge, and by a VXLAN; the kernel
#                      ULPs NFS/RDMA, SRP, iSER, SMB Direct and RDS between two VMs on
#                      a kernel of their own: ~26 min more to build it when cold)
#
# Everything expensive (sysroot, kernel tree and objects, cargo target dir, run logs) lives in
# $(FERRDMA_CACHE), outside the repository. Needs root (mmdebstrap, chroot, bind mounts).

FERRDMA_CACHE ?= /var/cache/ferrdma
export FERRDMA_CACHE
export CARGO_TARGET_DIR ?= $(FERRDMA_CACHE)/cargo-target

.PHONY: all help sysroot kernel kernel-kasan kernel-ulp nic progs kmod run bench incast fuzz-uverbs fuzz-nic check check-kasan check-nic check-vm check-long check-baseline fmt clean-cache

all: kernel nic

help:
	@sed -n 's/^#   //p' Makefile

sysroot:
	@scripts/sysroot.sh >/dev/null

kernel:
	@scripts/kernel.sh

# The KASAN lane's kernel (kernel/configs/kasan.config on top), for tests with kasan=yes.
kernel-kasan:
	@scripts/kernel.sh kasan
	@scripts/in-sysroot.sh bash -c 'FERRDMA_KBUILD=/ferrdma/cache/kernel/build-kasan \
		/ferrdma/src/tools/testing/ferrdma/kmod/build.sh >/dev/null'

# The ULP tests' kernel (kernel/configs/ulp.config on top: NFS, SCSI, LIO, cifs, ksmbd, RDS
# as modules), for tests with ulp=yes; ~25 min cold on 2 cores, so not built by make check.
kernel-ulp:
	@scripts/kernel.sh ulp

nic:
	@scripts/nic.sh

# The verbs test programs of the VM suite (tools/testing/ferrdma/progs), cached by content.
progs:
	@tools/testing/ferrdma/progs/build.sh >/dev/null

# The kernel-verbs test module of the VM suite (tools/testing/ferrdma/kmod), built out of tree
# against the kernel build and cached by content (sources, compiler, kernel build).
kmod: kernel
	@tools/testing/ferrdma/kmod/build.sh >/dev/null

run: kernel nic
	@scripts/run-demo.sh

# ~20 min with BENCH_REPS=3 under TCG; the run's directory is printed (table, CSV, plots).
bench: kernel nic
	@scripts/bench.sh

# Issue 18's incast experiment (lossy and DCQCN) as CSV and a PNG; under a minute.
incast: sysroot
	@scripts/incast.sh

# The uverbs fuzzer of make check (tests/uverbs-fuzz-ferrdma.sh), longer and with a fresh seed
# unless FUZZ_SEED replays one; about 1 s per 1000 commands under TCG plus a minute.
FUZZ_COMMANDS ?= 1000000
FUZZ_SEED ?= $(shell date +%s)
fuzz-uverbs: kernel nic progs
	@scripts/in-sysroot.sh /ferrdma/src/tools/testing/ferrdma/ferrdma-vm \
		--timeout $$(( $(FUZZ_COMMANDS) / 200 + 600 )) \
		/ferrdma/src/tools/testing/ferrdma/tests/uverbs-fuzz-ferrdma.sh $(FUZZ_COMMANDS) $(FUZZ_SEED)

# The driver-heavy VM tests that make check runs on the default kernel (for its time budget),
# here on the KASAN kernel: each takes 2.5-4x as long there, and the KASAN kernel's cold
# build (~20 min on 2 cores) does not fit make check's cold budget. After each test's script
# a planted use-after-free must be reported (the lane proves it looks).
KASAN_TESTS ?= verbs-hostile-verbs verbs-removal-ferrdma fault-inject-ferrdma \
	uverbs-fuzz-ferrdma insmod-cycles verbs-churn kverbs-loopback-ferrdma \
	events-destroy-ferrdma events-destroy-moderated-ferrdma events-race-ferrdma \
	verbs-bad-udata nvmeof-loopback-ferrdma admin-hang-ferrdma fatal-reset-ferrdma \
	fatal-nvmeof-ferrdma nic-killed-ferrdma
check-kasan: kernel kernel-kasan nic progs kmod
	@scripts/in-sysroot.sh /ferrdma/src/tools/testing/ferrdma/run-tests \
		$(foreach t,$(KASAN_TESTS),--filter $(t) --kasan $(t))

# The device model's fuzz storm (tools/ferrdma-nic/src/testhost/fuzz.rs), an ignored cargo
# test: make check runs the same properties with 96 sequences each.
FUZZ_OPS ?= 2000000
fuzz-nic:
	@cd tools/ferrdma-nic && FERRDMA_FUZZ_OPS=$(FUZZ_OPS) cargo test --release --locked \
		--lib -- --ignored fuzz_storm --nocapture

check:
	@scripts/check.sh

# Parts of `make check`, for quicker iterations.
check-nic:
	@cd tools/ferrdma-nic && cargo test

check-vm: kernel nic progs kmod
	@scripts/in-sysroot.sh /ferrdma/src/tools/testing/ferrdma/run-tests

# The long suites (issue 20; not in check, for its time budget): fabrics in two network
# namespaces joined by host networking (split-fabric-*, ~4 min on 2 cores) and the kernel
# ULPs between two VMs (ulp-*-ferrdma, 130-290 s each).
check-long: kernel kernel-ulp nic progs kmod
	@scripts/in-sysroot.sh /ferrdma/src/tools/testing/ferrdma/run-tests --long

# The same tests on soft RoCE (rxe), the baseline ferrdma is compared with (not in check).
check-baseline: kernel kernel-ulp nic progs kmod
	@scripts/in-sysroot.sh /ferrdma/src/tools/testing/ferrdma/run-tests --baseline

# Format our Rust: the kernel's rustfmt rules for drivers/ and rust/, cargo fmt for the NIC.
fmt: kernel
	@scripts/in-sysroot.sh bash -c 'cd /ferrdma/src && rustfmt --edition 2021 \
		--config-path /ferrdma/cache/kernel/src/.rustfmt.toml $$(find drivers rust -name "*.rs")'
	@cd tools/ferrdma-nic && cargo fmt

clean-cache:
	rm -rf $(FERRDMA_CACHE)
