//! ferrdma-nic: the ferrdma RoCEv2 RDMA NIC as a vfio-user device server.
//!
//! QEMU attaches a device with `-device vfio-user-pci,socket=...`; each socket this process
//! serves is one NIC function. See `README.md` for the module map.

#[path = "../../../drivers/infiniband/hw/ferrdma/interface.rs"]
pub mod interface;

pub mod device;
pub mod dma;
pub mod fabric;
pub mod log_limit;
pub mod pci;
pub mod rdma;
pub mod shared;
pub mod vfio;
pub mod wire;

#[cfg(test)]
mod interface_layout;
#[cfg(test)]
mod testhost;
