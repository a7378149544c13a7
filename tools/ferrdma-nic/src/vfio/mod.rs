//! vfio-user: the protocol, our server of it, the region layout QEMU sees, `SET_IRQS`
//! decoding, and serving one device on one Unix socket.

pub mod irq_request;
pub mod layout;
pub mod protocol;
pub mod server;
pub mod socket;

#[cfg(test)]
mod proptests_backend;
#[cfg(test)]
mod proptests_server;
