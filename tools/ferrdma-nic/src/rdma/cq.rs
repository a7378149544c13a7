//! Completion queues: the irdma GEN_2 CQ ring written by the device, with polarity per pass,
//! two-slot extended CQEs, overflow detection from the shadow consumer index, and arming
//! from the shadow arm word (one event per arm sequence number).
//!
//! Doorbell writes are posted (QEMU's vfio-user-pci does not wait for them), so a consumer
//! that arms and then polls may poll before the device has seen the arm, and a CQE written
//! in between would never raise an event. Hence, as on real NICs, an arm that finds CQEs the
//! consumer has not polled yet (shadow head != tail) fires at once: for solicited-only arms,
//! if a solicited or error CQE is among them. A spurious wakeup is allowed; a lost one is not.

use crate::dma::{DmaError, GuestMemory};
use crate::interface::{ae, bits, cq_shadow, cqe, CQE_SIZE};

use super::ring::Ring;

/// What the next CQE must be to raise an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    Off,
    Any,
    Solicited,
}

/// A CQE ready to be written: the four qwords of slot 0 (valid bit filled in here) and the
/// optional extension slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqeData {
    pub qw: [u64; 4],
    pub ext: Option<[u64; 4]>,
}

impl CqeData {
    fn solicited_or_error(&self) -> bool {
        self.qw[3] & ((1 << cqe::SOEVENT) | (1 << cqe::ERROR)) != 0
    }
}

/// The result of writing a CQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqWrite {
    /// Written; `event` says the CQ was armed for it (and is now disarmed).
    Written { event: bool },
    /// Not written; if `Some`, the CQ just stopped for this reason (an [`ae`] code).
    Dropped(Option<u16>),
}

/// One completion queue.
#[derive(Debug)]
pub struct Cq {
    pub eq_id: u32,
    pub db_page: u32,
    pub shadow: u64,
    ring: Ring,
    tail: u32,
    polarity: bool,
    pub arm: Arm,
    last_seq: u8,
    /// Ring index of the newest solicited or error CQE.
    last_solicited: Option<u32>,
    pub stopped: bool,
}

fn encode(qw: &[u64; 4]) -> [u8; CQE_SIZE] {
    let mut b = [0u8; CQE_SIZE];
    for (chunk, q) in b.chunks_exact_mut(8).zip(qw) {
        chunk.copy_from_slice(&q.to_le_bytes());
    }
    b
}

impl Cq {
    /// A new CQ: tail 0, polarity 1, disarmed, arm sequence 0.
    pub fn new(ring: Ring, shadow: u64, eq_id: u32, db_page: u32) -> Self {
        Self {
            eq_id,
            db_page,
            shadow,
            ring,
            tail: 0,
            polarity: true,
            arm: Arm::Off,
            last_seq: 0,
            last_solicited: None,
            stopped: false,
        }
    }

    /// Bus address of the shadow-area qword at byte `offset` (the shadow address is a guest
    /// value and may sit just below 2^64).
    fn shadow_word(&self, offset: usize) -> Result<u64, DmaError> {
        self.shadow
            .checked_add(offset as u64)
            .ok_or(DmaError::Overflow {
                addr: self.shadow,
                len: offset as u64 + 8,
            })
    }

    /// Switches to a new ring (resize): index 0, polarity 1.
    pub fn resize(&mut self, ring: Ring) {
        self.ring = ring;
        self.tail = 0;
        self.polarity = true;
        self.last_solicited = None;
    }

    /// Ring size.
    pub fn size(&self) -> u32 {
        self.ring.entries()
    }

    /// The CQ-arm doorbell: reads the arm word and arms if its sequence number is new.
    /// Returns `true` if the new arm found unpolled CQEs it covers: the event is then due
    /// now and the CQ is disarmed again (see the module comment). Fails if the shadow area
    /// is not readable (the arm state is then unchanged).
    pub fn arm_doorbell(&mut self, mem: &dyn GuestMemory) -> Result<bool, DmaError> {
        let mut w = [0u8; 8];
        mem.read(self.shadow_word(cq_shadow::ARM_OFFSET)?, &mut w)?;
        let word = u64::from_le_bytes(w);
        let seq = bits(word, cq_shadow::ARM_SEQ_LO + 1, cq_shadow::ARM_SEQ_LO) as u8;
        if seq == self.last_seq {
            return Ok(false);
        }
        self.last_seq = seq;
        self.arm = if bits(word, cq_shadow::ARM_NEXT, cq_shadow::ARM_NEXT) != 0 {
            Arm::Any
        } else if bits(word, cq_shadow::ARM_NEXT_SE, cq_shadow::ARM_NEXT_SE) != 0 {
            Arm::Solicited
        } else {
            Arm::Off
        };
        let Some(head) = self.head(mem)? else {
            return Ok(false);
        };
        let size = self.ring.entries();
        let unpolled = (self.tail + size - head) % size;
        let due = match self.arm {
            Arm::Off => false,
            Arm::Any => unpolled > 0,
            Arm::Solicited => self
                .last_solicited
                .is_some_and(|i| (i + size - head) % size < unpolled),
        };
        if due {
            self.arm = Arm::Off;
        }
        Ok(due)
    }

    /// The consumer index from the shadow area, or `None` if it is out of range.
    fn head(&self, mem: &dyn GuestMemory) -> Result<Option<u32>, DmaError> {
        let mut h = [0u8; 8];
        mem.read(self.shadow_word(cq_shadow::HEAD_OFFSET)?, &mut h)?;
        let head = (u64::from_le_bytes(h) & cq_shadow::HEAD_MASK) as u32;
        Ok((head < self.ring.entries()).then_some(head))
    }

    /// Free slots according to the shadow consumer index, or `None` if it is unusable.
    fn free_slots(&self, mem: &dyn GuestMemory) -> Result<Option<u32>, DmaError> {
        let Some(head) = self.head(mem)? else {
            return Ok(None);
        };
        let size = self.ring.entries();
        let used = (self.tail + size - head) % size;
        Ok(Some(size - 1 - used))
    }

    fn slot_valid(&self, index_ahead: u32) -> bool {
        // The slot `index_ahead` after the tail is on the next pass if it wrapped.
        let wraps = self.tail + index_ahead >= self.ring.entries();
        self.polarity ^ wraps
    }

    /// Writes `c` at the tail (slot 0 qw3 last).
    pub fn write(&mut self, mem: &dyn GuestMemory, c: &CqeData) -> CqWrite {
        if self.stopped {
            return CqWrite::Dropped(None);
        }
        let need = if c.ext.is_some() { 2 } else { 1 };
        match self.free_slots(mem) {
            Err(_) => {
                self.stopped = true;
                return CqWrite::Dropped(Some(ae::CQ_ACCESS));
            }
            Ok(Some(free)) if free < need => {
                self.stopped = true;
                return CqWrite::Dropped(Some(ae::CQ_OVERFLOW));
            }
            Ok(_) => {}
        }
        let valid = |v: bool| if v { 1u64 << cqe::VALID } else { 0 };
        let mut main = c.qw;
        main[3] = (main[3] & !(1 << cqe::VALID)) | valid(self.slot_valid(0));
        if c.ext.is_some() {
            main[3] |= 1 << cqe::EXTCQE;
        }
        let main_addr = self.ring.addr(self.tail);
        let mut ok = true;
        if let Some(mut ext) = c.ext {
            ext[3] = (ext[3] & !(1 << cqe::VALID)) | valid(self.slot_valid(1));
            ok &= mem
                .write(self.ring.addr(self.tail + 1), &encode(&ext))
                .is_ok();
        }
        let bytes = encode(&main);
        ok &= mem.write(main_addr, bytes.get(..24).unwrap_or(&[])).is_ok();
        ok &= mem
            .write(main_addr + 24, bytes.get(24..).unwrap_or(&[]))
            .is_ok();
        if !ok {
            self.stopped = true;
            return CqWrite::Dropped(Some(ae::CQ_ACCESS));
        }
        let size = self.ring.entries();
        if c.solicited_or_error() {
            self.last_solicited = Some(self.tail);
        }
        self.tail += need;
        if self.tail >= size {
            self.tail -= size;
            self.polarity = !self.polarity;
        }
        let event = match self.arm {
            Arm::Any => true,
            Arm::Solicited => c.solicited_or_error(),
            Arm::Off => false,
        };
        if event {
            self.arm = Arm::Off;
        }
        CqWrite::Written { event }
    }
}
