//! Completion queues: the irdma GEN_2 CQ ring written by the device, with polarity per pass,
//! two-slot extended CQEs, overflow detection from the shadow consumer index, and arming
//! from the shadow arm word (one event per arm doorbell).
//!
//! Doorbell writes are posted (QEMU's vfio-user-pci does not wait for them), so a consumer
//! that arms and then polls may poll before the device has seen the arm, and a CQE written
//! in between would never raise an event. So an arm that finds CQEs the consumer has not
//! polled yet (shadow head != tail; for solicited-only arms, a solicited or error CQE among
//! them) cannot just wait for the next CQE. Firing at once is wrong the other way round: the
//! usual consumer acknowledges an event, arms and then polls the very CQEs the arm found, and
//! an event per arm for CQEs it has already taken breaks consumers that poll once per event
//! (perftest `-e` leaves a completion behind for every spurious event until the CQ
//! overflows). Hence an arm check: [`ARM_CHECK_US`] after such an arm the device reads the
//! consumer index again, and raises the event only if the CQEs the arm found are still
//! unpolled (the consumer is asleep). A new CQE that satisfies the arm fires as usual. A
//! spurious wakeup is still allowed (a consumer that takes longer to poll); a lost one is not.
//!
//! A resize (MODIFY_CQ) switches the device to a new ring at once, while the consumer still
//! polls the old ring's last CQEs and stores *their* indices as the consumer index. It
//! counts the rings it has retired in the arm word's `SW_CQ_SELECT`; until that count
//! matches the device's resizes the consumer has polled nothing of the current ring, so the
//! device takes its index there to be 0 (exact: the current ring cannot have wrapped
//! without overflowing first).

use crate::dma::{DmaError, GuestMemory};
use crate::interface::{ae, bits, cq_shadow, cqe, CQE_SIZE};

use super::ring::Ring;

/// How long after an arm that found unpolled CQEs the device looks again whether the
/// consumer polled them (see the module comment), in microseconds.
pub const ARM_CHECK_US: u64 = 1_000;

/// A pending look at the consumer index (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ArmCheck {
    /// Device time of the look.
    at_us: u64,
    /// Consumer index when the arm was taken.
    head: u32,
    /// How far the consumer index must have moved since: past every CQE that satisfied the
    /// arm then.
    needed: u32,
}

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
    /// Echoed in the `tag` of this CQ's events (CREATE_CQ `event_tag`).
    pub event_tag: u32,
    pub db_page: u32,
    pub shadow: u64,
    ring: Ring,
    tail: u32,
    polarity: bool,
    pub arm: Arm,
    /// `ARM_SEQ` of the last arm word read; only for traces (see [`Cq::arm_doorbell`]).
    last_seq: u8,
    /// Ring index of the newest solicited or error CQE.
    last_solicited: Option<u32>,
    /// An arm found CQEs it covers unpolled: whether to raise the event is decided later.
    check: Option<ArmCheck>,
    /// Resizes made, modulo 2^14 (compared with the consumer's `SW_CQ_SELECT`).
    resizes: u64,
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
            event_tag: 0,
            db_page,
            shadow,
            ring,
            tail: 0,
            polarity: true,
            arm: Arm::Off,
            last_seq: 0,
            last_solicited: None,
            check: None,
            resizes: 0,
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

    /// Switches to a new ring (resize): index 0, polarity 1. CQEs already written stay in
    /// the old ring for the consumer to poll. With a new shadow area (`Some`), the consumer
    /// index and `SW_CQ_SELECT` there belong to the new ring alone.
    pub fn resize(&mut self, ring: Ring, shadow: Option<u64>) {
        self.ring = ring;
        self.tail = 0;
        self.polarity = true;
        self.last_solicited = None;
        self.check = None;
        self.resizes = (self.resizes + 1) & cq_shadow::SELECT_MASK;
        if let Some(s) = shadow {
            self.shadow = s;
            self.resizes = 0;
        }
    }

    /// CQEs of the current ring the consumer has not polled, or `None` if its consumer
    /// index is unusable. A resize to a ring of `entries` must leave room for them.
    pub fn unpolled(&self, mem: &dyn GuestMemory) -> Result<Option<u32>, DmaError> {
        let size = self.ring.entries();
        Ok(self.head(mem)?.map(|head| (self.tail + size - head) % size))
    }

    /// Ring size.
    pub fn size(&self) -> u32 {
        self.ring.entries()
    }

    /// The CQ-arm doorbell at device time `now_us`: reads the arm word and arms as it says.
    /// If the arm finds unpolled CQEs it covers, an arm check is due [`ARM_CHECK_US`] later
    /// (see the module comment and [`Cq::check_due`]). Fails if the shadow area is not
    /// readable (the arm state is then unchanged).
    ///
    /// Every doorbell arms, whatever `ARM_SEQ` says. Doorbells trap, so none is lost, but
    /// they are processed some time after software wrote them, and by then the arm word
    /// may be several arms newer: four arms (the 2-bit sequence wraps) between two doorbell
    /// reads made the old "new sequence number only" rule drop every one of them, and the
    /// consumer slept forever. A doorbell repeated by software costs at most a spurious
    /// event, which consumers must tolerate anyway.
    pub fn arm_doorbell(&mut self, mem: &dyn GuestMemory, now_us: u64) -> Result<(), DmaError> {
        let mut w = [0u8; 8];
        mem.read(self.shadow_word(cq_shadow::ARM_OFFSET)?, &mut w)?;
        let word = u64::from_le_bytes(w);
        let seq = bits(word, cq_shadow::ARM_SEQ_LO + 1, cq_shadow::ARM_SEQ_LO) as u8;
        log::trace!(
            "CQ arm: word {word:#x} seq {seq} (last {}), tail {}",
            self.last_seq,
            self.tail
        );
        self.last_seq = seq;
        self.arm = if bits(word, cq_shadow::ARM_NEXT, cq_shadow::ARM_NEXT) != 0 {
            Arm::Any
        } else if bits(word, cq_shadow::ARM_NEXT_SE, cq_shadow::ARM_NEXT_SE) != 0 {
            Arm::Solicited
        } else {
            Arm::Off
        };
        self.check = None;
        let Some(head) = self.head(mem)? else {
            return Ok(());
        };
        let size = self.ring.entries();
        let unpolled = (self.tail + size - head) % size;
        let needed = match self.arm {
            Arm::Off => None,
            Arm::Any => (unpolled > 0).then_some(unpolled),
            Arm::Solicited => self
                .last_solicited
                .map(|i| (i + size - head) % size)
                .filter(|&d| d < unpolled)
                .map(|d| d + 1),
        };
        self.check = needed.map(|needed| ArmCheck {
            at_us: now_us.saturating_add(ARM_CHECK_US),
            head,
            needed,
        });
        Ok(())
    }

    /// When the pending arm check is due, if there is one.
    pub fn check_deadline(&self) -> Option<u64> {
        self.check.map(|c| c.at_us)
    }

    /// Runs the arm check if it is due at `now_us`. Returns `true` if the event is due now
    /// (the CQEs the arm found are still unpolled, or the consumer index cannot be read);
    /// the CQ is then disarmed.
    pub fn check_due(&mut self, mem: &dyn GuestMemory, now_us: u64) -> bool {
        let Some(c) = self.check.filter(|c| now_us >= c.at_us) else {
            return false;
        };
        self.check = None;
        if self.stopped || self.arm == Arm::Off {
            return false;
        }
        let size = self.ring.entries();
        let polled = match self.head(mem) {
            Ok(Some(head)) => (head + size - c.head) % size,
            _ => 0,
        };
        let due = polled < c.needed;
        if due {
            self.arm = Arm::Off;
        }
        due
    }

    /// The consumer index on the current ring, from the shadow area, or `None` if it is out
    /// of range. 0 while the consumer still drains a ring from before a resize (see the
    /// module comment).
    fn head(&self, mem: &dyn GuestMemory) -> Result<Option<u32>, DmaError> {
        let mut w = [0u8; 8];
        mem.read(self.shadow_word(cq_shadow::ARM_OFFSET)?, &mut w)?;
        if u64::from_le_bytes(w) & cq_shadow::SELECT_MASK != self.resizes {
            return Ok(Some(0));
        }
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
            self.check = None;
        }
        CqWrite::Written { event }
    }
}
