// SPDX-License-Identifier: GPL-2.0

//! Event queues (manual, "Event queues"): the AEQ on vector 0 and one CEQ per completion
//! vector. The device writes 16-byte entries whose valid bit equals the pass polarity; the
//! interrupt handler of the EQ's vector consumes them and re-arms the queue with its new
//! consumer index.

use crate::{interface as hw, regs, regs::Bar0};
use kernel::{
    device,
    dma::Coherent,
    io::{io_read, Io},
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        barrier::{dma_mb, Read},
    },
};

/// Entries per event queue.
pub(crate) const EQ_ENTRIES: u32 = 1024;
const EQE_QWORDS: usize = hw::EQE_SIZE / 8;

const _: () = assert!(EQ_ENTRIES.is_power_of_two());
const _: () = assert!(EQ_ENTRIES >= hw::MIN_EQ_ENTRIES && EQ_ENTRIES <= hw::MAX_EQ_ENTRIES);

/// Consumer position in an event queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cursor {
    /// Next entry to read.
    pub(crate) cons: u32,
    /// Valid-bit value that marks an entry of the current pass.
    pub(crate) phase: bool,
}

impl Cursor {
    /// Where a new queue starts: entry 0, phase 1.
    pub(crate) const START: Self = Self {
        cons: 0,
        phase: true,
    };

    /// The position after consuming one entry of a ring of `entries`.
    pub(crate) const fn advance(self, entries: u32) -> Self {
        let cons = (self.cons + 1) & (entries - 1);
        Self {
            cons,
            phase: if cons == 0 { !self.phase } else { self.phase },
        }
    }

    /// Whether an entry with `flags` was written in this cursor's pass.
    pub(crate) const fn is_new(self, flags: u8) -> bool {
        (flags & hw::EQE_FLAG_VALID != 0) == self.phase
    }

    const fn pack(self) -> u32 {
        self.cons | if self.phase { 1 << 31 } else { 0 }
    }

    const fn unpack(v: u32) -> Self {
        Self {
            cons: v & !(1 << 31),
            phase: v & (1 << 31) != 0,
        }
    }
}

/// One event queue.
pub(crate) struct EventQueue {
    id: u32,
    ring: Coherent<[u64]>,
    /// Packed [`Cursor`]; only the EQ's own interrupt handler advances it, and Linux never
    /// runs one handler on two CPUs at once.
    cursor: Atomic<u32>,
}

impl EventQueue {
    /// Allocates the ring of EQ `id`.
    pub(crate) fn new(dev: &device::Device<device::Bound>, id: u32) -> Result<Self> {
        let ring =
            Coherent::<u64>::zeroed_slice(dev, EQ_ENTRIES as usize * EQE_QWORDS, GFP_KERNEL)?;
        Ok(Self {
            id,
            ring,
            cursor: Atomic::new(Cursor::START.pack()),
        })
    }

    /// The CREATE_EQ command for this queue; a CEQ gets `moderation_us` (see
    /// [`moderation`]), the AEQ none.
    pub(crate) fn create_cmd(&self, moderation_us: u16) -> hw::CreateEq {
        let aeq = self.id == hw::AEQ_VECTOR;
        hw::CreateEq {
            hdr: crate::admin::header(hw::admin_op::CREATE_EQ),
            eq_id: self.id,
            size: EQ_ENTRIES,
            vector: self.id,
            kind: if aeq {
                hw::EQ_KIND_AEQ
            } else {
                hw::EQ_KIND_CEQ
            },
            rsvd0: 0,
            moderation_us: if aeq { 0 } else { moderation_us },
            ring: hw::PageList {
                // Coherent memory is contiguous.
                addr: self.ring.dma_address(),
                npages: (EQ_ENTRIES as usize * hw::EQE_SIZE).div_ceil(hw::QUEUE_PAGE_SIZE as usize)
                    as u32,
                level: hw::PBL_LEVEL_CONTIG,
                rsvd0: 0,
                rsvd1: 0,
            },
            rsvd: [0; 32],
            rsvd1: [0; 32],
            rsvd2: [0; 24],
        }
    }

    fn read(&self, c: Cursor) -> Result<Option<hw::Eqe>> {
        let slot = c.cons as usize * EQE_QWORDS;
        let hi: u64 = io_read!(self.ring, [try: slot + 1]);
        if !c.is_new((hi >> 56) as u8) {
            return Ok(None);
        }
        // The valid bit is written last: read the rest only after seeing it.
        dma_mb(Read);
        let lo: u64 = io_read!(self.ring, [try: slot]);
        let mut b = [0u8; hw::EQE_SIZE];
        b[..8].copy_from_slice(&lo.to_le_bytes());
        b[8..].copy_from_slice(&hi.to_le_bytes());
        Ok(Some(hw::Eqe::decode(&b)))
    }

    /// Hands every new entry to `f`, then tells the device the new consumer index and
    /// re-arms. Returns how many entries there were. Interrupt context.
    pub(crate) fn drain(&self, bar: &Bar0<'_>, mut f: impl FnMut(&hw::Eqe)) -> u32 {
        let mut c = Cursor::unpack(self.cursor.load(Relaxed));
        let mut n = 0;
        // At most one ring's worth per interrupt, so a device that keeps writing cannot keep
        // the CPU here forever; the re-arm raises the vector again if more are pending.
        while n < EQ_ENTRIES {
            match self.read(c) {
                Ok(Some(e)) => f(&e),
                _ => break,
            }
            c = c.advance(EQ_ENTRIES);
            n += 1;
        }
        self.cursor.store(c.pack(), Relaxed);
        self.arm(bar, c.cons);
        n
    }

    /// Writes the EQ doorbell: consumer index `cons`, armed.
    pub(crate) fn arm(&self, bar: &Bar0<'_>, cons: u32) {
        bar.write_reg(regs::EQ_DOORBELL::zeroed().with_value(hw::eq_doorbell(self.id, cons, true)));
    }

    /// Arms the queue at its current position.
    pub(crate) fn arm_current(&self, bar: &Bar0<'_>) {
        self.arm(bar, Cursor::unpack(self.cursor.load(Relaxed)).cons);
    }
}

/// The CEQ moderation interval for a requested `us` (the `ceq_moderation_us` parameter) on a
/// device whose limit is `max_us` (0 on devices without time-based moderation): `EINVAL`
/// beyond the limit rather than a silently different interval.
pub(crate) fn moderation(us: u32, max_us: u16) -> Result<u16> {
    match u16::try_from(us) {
        Ok(us) if us <= max_us => Ok(us),
        _ => Err(EINVAL),
    }
}

#[kunit_tests(ferrdma_eq)]
mod tests {
    use super::*;

    #[test]
    fn cursor_wraps_and_flips_phase() {
        let mut c = Cursor::START;
        for _ in 0..15 {
            c = c.advance(16);
        }
        assert_eq!(
            c,
            Cursor {
                cons: 15,
                phase: true
            }
        );
        c = c.advance(16);
        assert_eq!(
            c,
            Cursor {
                cons: 0,
                phase: false
            }
        );
        assert!(c.is_new(0));
        assert!(!c.is_new(hw::EQE_FLAG_VALID));
        assert!(Cursor::START.is_new(hw::EQE_FLAG_VALID));
        assert!(!Cursor::START.is_new(0x7f));
    }

    #[test]
    fn cursor_packs_losslessly() {
        for c in [
            Cursor::START,
            Cursor {
                cons: 0,
                phase: false,
            },
            Cursor {
                cons: EQ_ENTRIES - 1,
                phase: true,
            },
        ] {
            assert_eq!(Cursor::unpack(c.pack()), c);
        }
    }

    #[test]
    fn moderation_within_the_device_limit() {
        assert_eq!(moderation(0, 0), Ok(0));
        assert_eq!(moderation(0, 8160), Ok(0));
        assert_eq!(moderation(50, 8160), Ok(50));
        assert_eq!(moderation(8160, 8160), Ok(8160));
        assert_eq!(moderation(8161, 8160), Err(EINVAL));
        // A device without time-based moderation.
        assert_eq!(moderation(5, 0), Err(EINVAL));
        // No truncation to u16.
        assert_eq!(moderation(0x1_0010, 8160), Err(EINVAL));
    }

    #[test]
    fn doorbell_encoding() {
        assert_eq!(hw::eq_doorbell(5, 0x1234, true), 0x8500_1234);
        assert_eq!(hw::eq_doorbell(0, EQ_ENTRIES - 1, false), 0x3ff);
        // An out-of-range index cannot spill into the id or arm bits.
        assert_eq!(hw::eq_doorbell(1, 0x0100_0000, false), 0x0100_0000);
    }
}
