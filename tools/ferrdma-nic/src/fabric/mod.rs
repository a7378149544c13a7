//! The fabric: the L2 segment joining NICs, VMs' virtio-nets and plain VMs. `stream` speaks
//! QEMU's `-netdev stream` framing, `switch` decides where frames go (with the RoCE steering
//! rule), `pcap` records what it forwards, `queue` carries frames to a NIC's engine and `hub`
//! runs it all on unix sockets.

pub mod control;
pub mod egress;
pub mod fault;
pub mod hub;
pub mod pcap;
pub mod pcapcheck;
pub mod pfc;
pub mod queue;
pub mod raw;
pub mod stream;
pub mod switch;

#[cfg(test)]
mod testframes;
