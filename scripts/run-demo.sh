#!/usr/bin/env bash
# `make run`: boot two VMs, each with a ferrdma NIC, on one LAN and run the demo in both.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
log "run: booting 2 VMs with ferrdma NICs (TCG; about a minute)"
exec "$here/in-sysroot.sh" /ferrdma/src/tools/testing/ferrdma/ferrdma-vm --vms 2 \
	/ferrdma/src/tools/testing/ferrdma/demo/demo.sh
