//! A frame on its way to a NIC engine's receiver, with what is known of its ICRC.
//!
//! When the fabric hands a frame a NIC engine built to another engine of the same process
//! with nothing between that could change a byte (no fault link, no link model, no LAN or
//! host interface: `fabric/hub.rs` decides), checking its ICRC on receipt proves nothing and
//! cost ~15% of the NIC's CPU in a two-VM stream (the CRC was a quarter of the NIC's
//! samples, half of it the receiver's). The frame then travels as [`Icrc::BuiltHere`], and
//! carries an ICRC only if something else saw it (the switch seals an engine's frame before
//! anything else may see it, `packet::Seal`). The bytes cannot be changed afterwards: an `RxFrame` hands them out
//! only to read, or as a plain `Vec<u8>` that is a frame of unknown ICRC again. Every other
//! frame (a guest's LAN, a capture replayed, a host interface, a test) is [`Icrc::Verify`].

use super::packet::Icrc;

/// A frame to an engine's receiver.
///
/// # Invariants
///
/// With [`Icrc::BuiltHere`], `bytes` are exactly what a NIC engine of this process built
/// (sealed or not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RxFrame {
    bytes: Vec<u8>,
    icrc: Icrc,
}

impl RxFrame {
    /// A frame from anywhere: its ICRC is checked on receipt.
    pub fn from_wire(bytes: Vec<u8>) -> Self {
        Self {
            bytes,
            icrc: Icrc::Verify,
        }
    }

    /// A frame an engine of this process built, unchanged since (the caller's promise, and
    /// the reason this is not public: only the fabric's switch can keep it).
    pub(crate) fn built_here(bytes: Vec<u8>) -> Self {
        Self {
            bytes,
            icrc: Icrc::BuiltHere,
        }
    }

    /// The frame.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// What is known of its ICRC.
    pub fn icrc(&self) -> Icrc {
        self.icrc
    }

    /// The frame's bytes, no longer vouched for.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

impl From<Vec<u8>> for RxFrame {
    fn from(bytes: Vec<u8>) -> Self {
        Self::from_wire(bytes)
    }
}
