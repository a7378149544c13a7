//! The PCI function as the guest sees it: config space, the BAR0 register file, the MSI-X
//! capability and its BAR (the doorbell BAR belongs to the RDMA engine, `crate::rdma`).

pub mod bar0;
pub mod config_space;
pub mod msix;
pub mod msix_bar;

#[cfg(test)]
mod proptests;
