//! ferrdma-nic: the ferrdma RoCEv2 RDMA NIC as a vfio-user device server.
//!
//! QEMU attaches a device with `-device vfio-user-pci,socket=...`; each socket this process
//! serves is one NIC function. See `README.md` for the module map.

#[path = "../../../drivers/infiniband/hw/ferrdma/interface.rs"]
pub mod interface;

pub mod bar0;
pub mod config_space;
pub mod device;
pub mod dma;
pub mod fabric;
pub mod irq_request;
pub mod log_limit;
pub mod mapping;
pub mod msix;
pub mod msix_bar;
pub mod rdma;
pub mod server;
pub mod shared;
pub mod vfio_layout;
pub mod vfio_protocol;
pub mod vfio_server;
pub mod wire;

#[cfg(test)]
mod interface_layout;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod proptests_backend;
#[cfg(test)]
mod proptests_vfio;
#[cfg(test)]
mod testhost;
