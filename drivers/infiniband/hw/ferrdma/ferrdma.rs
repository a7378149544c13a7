// SPDX-License-Identifier: GPL-2.0

//! ferrdma: driver for the ferrdma emulated E810-class RoCEv2 NIC.
//!
//! The device is served to QEMU over vfio-user by `tools/ferrdma-nic`; the interface between
//! the two is defined once, in `interface.rs`, and described in
//! `Documentation/infiniband/ferrdma/programming-manual.rst`.

mod abi;
mod admin;
mod ah;
mod caps;
mod cc_params;
mod counters;
mod cq;
mod driver;
mod eq;
mod event_tag;
mod fault;
mod graveyard;
mod ibdev;
mod id_alloc;
// Shared with the device model, which uses every item: here only a part is reachable.
#[allow(unreachable_pub)]
mod interface;
mod kcq;
mod kqp;
mod kring;
mod kwqe;
mod mcast;
mod mr;
mod pbl;
mod qp;
mod regs;
mod selftest;
mod sizing;
mod sq_track;

kernel::module_pci_driver! {
    type: driver::FerrdmaDriver,
    name: "ferrdma",
    authors: ["ferrdma developers"],
    description: "ferrdma emulated E810-class RoCEv2 NIC",
    license: "GPL v2",
    params: {
        ceq_moderation_us: u32 {
            default: 0,
            description: "Least time between two completion interrupts of one CEQ in microseconds (0: every event at once; at most the device's limit, 8160 on ferrdma-nic)",
        },
        fault_every: u32 {
            default: 0,
            description: "Test only: one fallible step in N of creating a verbs object fails with ENOMEM (0: none)",
        },
    },
}
