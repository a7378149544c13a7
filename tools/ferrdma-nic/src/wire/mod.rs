//! The RoCEv2 packet layer: header formats, the opcode table, the ICRC, and whole-frame
//! build/parse. Pure functions on byte slices, no I/O, so the transport engine and the
//! fabric can share it. Parsing treats every byte as hostile: it returns `WireError`, never
//! panics, never reads out of bounds.

pub mod aeth;
pub mod bth;
pub mod checksum;
pub mod ecn;
pub mod error;
pub mod eth;
pub mod ext;
pub mod frame_pool;
pub mod icrc;
pub mod ipv4;
pub mod ipv6;
pub mod opcode;
pub mod packet;
pub mod pfc;
pub mod rx_frame;
pub mod udp;

#[cfg(test)]
mod proptests;
#[cfg(test)]
pub(crate) mod tests;

pub use error::WireError;
pub use packet::{
    build, build_as, build_frame, build_with, parse, parse_with, seal, ExtHeaders, Headers, Icrc,
    IpHeader, Parsed, Seal,
};
pub use rx_frame::RxFrame;
