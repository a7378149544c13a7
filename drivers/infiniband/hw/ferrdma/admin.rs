// SPDX-License-Identifier: GPL-2.0

//! The admin queue: a command ring and a completion ring in coherent memory (manual, "Admin
//! queue"). Commands run one at a time; the driver busy-polls the completion's phase bit, so a
//! command may be issued from atomic context (kernel consumers create address handles and
//! flush queues there).

use crate::{interface as hw, regs, regs::Bar0};
use kernel::{
    device,
    dma::Coherent,
    io::{io_read, io_write, Io},
    prelude::*,
    sync::barrier::{dma_mb, Read},
    time::{delay::udelay, Delta, Instant, Monotonic},
};

/// Entries in each admin ring.
pub(crate) const AQ_ENTRIES: u32 = 64;
const CMD_QWORDS: usize = hw::ADMIN_CMD_SIZE / 8;
const CPL_QWORDS: usize = hw::ADMIN_CPL_SIZE / 8;
/// Bytes of the output buffer of QUERY_* commands.
const OUT_BYTES: usize = 4096;
/// Poll interval while waiting for a completion.
const POLL_US: i64 = 2;

const _: () = assert!(AQ_ENTRIES.is_power_of_two());
const _: () = assert!(AQ_ENTRIES >= hw::AQ_MIN_ENTRIES && AQ_ENTRIES <= hw::AQ_MAX_ENTRIES);

/// Producer state of the command ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RingPos {
    /// Next slot to write.
    pub(crate) tail: u32,
    /// Phase the completion of the command in `tail` will carry.
    pub(crate) phase: bool,
}

impl RingPos {
    /// The state right after the queue is enabled.
    pub(crate) const START: Self = Self {
        tail: 0,
        phase: true,
    };

    /// The state after submitting one command in a ring of `entries` slots.
    pub(crate) const fn advance(self, entries: u32) -> Self {
        let tail = (self.tail + 1) & (entries - 1);
        Self {
            tail,
            phase: if tail == 0 { !self.phase } else { self.phase },
        }
    }
}

/// Whether a completion's flags show it was written in `phase`.
pub(crate) const fn completion_ready(flags: u16, phase: bool) -> bool {
    (flags & hw::ACQ_FLAG_PHASE != 0) == phase
}

/// The header of an admin command; `cmd_id` is filled in by [`AdminQueue::exec`].
pub(crate) const fn header(opcode: u8) -> hw::AdminHeader {
    hw::AdminHeader {
        opcode,
        flags: 0,
        cmd_id: 0,
        rsvd: 0,
    }
}

/// Maps an admin status to an errno.
pub(crate) fn status_to_error(status: u16) -> Result {
    use hw::admin_status as s;
    match status {
        s::OK => Ok(()),
        s::BAD_OPCODE | s::NOT_SUPPORTED => Err(EOPNOTSUPP),
        s::INVALID | s::BAD_ID | s::BAD_STATE => Err(EINVAL),
        s::EXISTS => Err(EEXIST),
        s::NOT_FOUND => Err(ENOENT),
        s::BUSY => Err(EBUSY),
        s::DMA_FAULT => Err(EFAULT),
        s::NO_RESOURCES => Err(ENOMEM),
        _ => Err(EIO),
    }
}

/// The admin queue of one function.
pub(crate) struct AdminQueue {
    cmds: Coherent<[u64]>,
    cpls: Coherent<[u64]>,
    out: Coherent<[u64]>,
    pos: RingPos,
    next_id: u16,
    /// Why the queue is dead, once a command timed out, completed out of order or found the
    /// device in its fatal state: the device no longer follows the protocol. Every later
    /// command fails at once (no timeout per command), and memory the device was told about
    /// must not be freed (it may still be written).
    death: Option<&'static str>,
}

/// Resets the RDMA engine and reads `DEV_STATUS` back, which also flushes the posted reset
/// write. `Err(status)` unless the device answers ready: a device that reads all-ones (gone)
/// or not ready may still be using host memory.
pub(crate) fn reset_engine(bar: &Bar0<'_>) -> core::result::Result<(), u32> {
    bar.write_reg(regs::DEV_CTRL::zeroed().with_command(hw::DEV_CTRL_RESET));
    let status = bar.read(regs::DEV_STATUS).into_raw();
    if status != u32::MAX && status & hw::DEV_STATUS_READY != 0 {
        Ok(())
    } else {
        Err(status)
    }
}

/// Whether the function is gone: its ID register, a constant, reads all-ones, as reads of
/// a PCI function that no longer answers do (surprise removal; a vfio-user server that died,
/// whose client then fails every access). Nothing answers, so nothing can access host
/// memory either: what was kept from a dead device can be freed.
pub(crate) fn device_gone(bar: &Bar0<'_>) -> bool {
    bar.read(regs::ID).into_raw() == u32::MAX
}

impl AdminQueue {
    /// Resets the RDMA engine, allocates the rings and enables the queue.
    pub(crate) fn new(dev: &device::Device<device::Bound>, bar: &Bar0<'_>) -> Result<Self> {
        if let Err(status) = reset_engine(bar) {
            dev_err!(
                dev,
                "RDMA engine not ready after reset (status {:#x})\n",
                status
            );
            return Err(EIO);
        }
        let n = AQ_ENTRIES as usize;
        let cmds = Coherent::<u64>::zeroed_slice(dev, n * CMD_QWORDS, GFP_KERNEL)?;
        let cpls = Coherent::<u64>::zeroed_slice(dev, n * CPL_QWORDS, GFP_KERNEL)?;
        let out = Coherent::<u64>::zeroed_slice(dev, OUT_BYTES / 8, GFP_KERNEL)?;
        let (aq, acq) = (cmds.dma_address(), cpls.dma_address());
        if aq % hw::AQ_BASE_ALIGN != 0 || acq % hw::AQ_BASE_ALIGN != 0 {
            return Err(EINVAL);
        }
        bar.write_reg(regs::AQ_BASE_LO::zeroed().with_value(aq as u32));
        bar.write_reg(regs::AQ_BASE_HI::zeroed().with_value((aq >> 32) as u32));
        bar.write_reg(regs::ACQ_BASE_LO::zeroed().with_value(acq as u32));
        bar.write_reg(regs::ACQ_BASE_HI::zeroed().with_value((acq >> 32) as u32));
        bar.write_reg(regs::AQ_SIZE::zeroed().with_entries(AQ_ENTRIES));
        bar.write_reg(regs::AQ_CTRL::zeroed().with_value(hw::AQ_CTRL_ENABLE));
        let status = bar.read(regs::AQ_STATUS).into_raw();
        if status != hw::aq_status::OK {
            dev_err!(dev, "admin queue did not start: status {}\n", status);
            return Err(EIO);
        }
        Ok(Self {
            cmds,
            cpls,
            out,
            pos: RingPos::START,
            next_id: 1,
            death: None,
        })
    }

    /// Runs one command and waits for its completion. `cmd` is the 128-byte command; its header
    /// `cmd_id` is filled in here. Returns the completion's `result`.
    ///
    /// A timeout or a completion for another command marks the queue dead: this and every
    /// later command fail with `EIO` without waiting (one timeout in all, not one per
    /// command: destroying a process's objects would otherwise spin for a second each with
    /// interrupts off).
    pub(crate) fn exec(&mut self, bar: &Bar0<'_>, cmd: &[u8; hw::ADMIN_CMD_SIZE]) -> Result<u32> {
        if self.is_dead() {
            return Err(EIO);
        }
        let mut cmd = *cmd;
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        cmd[2..4].copy_from_slice(&id.to_le_bytes());

        let slot = self.pos.tail as usize;
        for (q, chunk) in cmd.chunks_exact(8).enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            io_write!(self.cmds, [try: slot * CMD_QWORDS + q], u64::from_le_bytes(w));
        }
        let phase = self.pos.phase;
        self.pos = self.pos.advance(AQ_ENTRIES);
        // writel() orders the ring writes above before the doorbell.
        bar.write_reg(regs::AQ_TAIL::zeroed().with_value(self.pos.tail));

        let flags_qword = slot * CPL_QWORDS + 1;
        // The deadline is read from the clock, not counted in polls: under TCG on a loaded
        // host a udelay() can return far sooner than asked (its calibration from boot no
        // longer holds), and 500,000 polls of "2 µs" once ended in 0.1 s, killing the queue
        // while the device was answering.
        let start = Instant::<Monotonic>::now();
        let timeout = Delta::from_millis(i64::from(hw::ADMIN_TIMEOUT_MS));
        loop {
            let hi: u64 = io_read!(self.cpls, [try: flags_qword]);
            if completion_ready((hi >> 48) as u16, phase) {
                dma_mb(Read);
                let lo: u64 = io_read!(self.cpls, [try: slot * CPL_QWORDS]);
                let mut b = [0u8; hw::ADMIN_CPL_SIZE];
                b[..8].copy_from_slice(&lo.to_le_bytes());
                b[8..].copy_from_slice(&hi.to_le_bytes());
                let cpl = hw::AdminCompletion::decode(&b);
                if cpl.cmd_id != id {
                    self.die("a completion for another command");
                    return Err(EIO);
                }
                if cpl.status == hw::admin_status::FATAL {
                    self.die("the device is in its fatal state");
                    return Err(EIO);
                }
                status_to_error(cpl.status)?;
                return Ok(cpl.result);
            }
            if start.elapsed() >= timeout {
                self.die("a command timed out");
                return Err(EIO);
            }
            udelay(Delta::from_micros(POLL_US));
        }
    }

    /// Whether the device stopped following the admin protocol (see [`Self::exec`]).
    pub(crate) fn is_dead(&self) -> bool {
        self.death.is_some()
    }

    /// Why the queue is dead, if it is.
    pub(crate) fn death(&self) -> Option<&'static str> {
        self.death
    }

    fn die(&mut self, why: &'static str) {
        self.death = Some(why);
        pr_err!(
            "admin queue: {}; the device is considered dead: no more commands, and \
             memory it may still access is kept until removal resets it\n",
            why
        );
    }

    /// Runs a QUERY_* command for object `id` and returns the first `N` bytes it wrote.
    fn query<const N: usize>(&mut self, bar: &Bar0<'_>, opcode: u8, id: u32) -> Result<[u8; N]> {
        let q = hw::QueryObject {
            hdr: header(opcode),
            id,
            out_len: OUT_BYTES as u32,
            out_addr: self.out.dma_address(),
            rsvd: [0; 16],
            rsvd1: [0; 32],
            rsvd2: [0; 32],
            rsvd3: [0; 24],
        };
        self.exec(bar, &q.encode())?;
        let mut b = [0u8; N];
        for (q, chunk) in b.chunks_mut(8).enumerate() {
            let v: u64 = io_read!(self.out, [try: q]);
            chunk.copy_from_slice(&v.to_le_bytes()[..chunk.len()]);
        }
        Ok(b)
    }

    /// QUERY_CAPS: the device's limits.
    pub(crate) fn query_caps(&mut self, bar: &Bar0<'_>) -> Result<hw::Caps> {
        let b = self.query::<{ hw::Caps::SIZE }>(bar, hw::admin_op::QUERY_CAPS, 0)?;
        Ok(hw::Caps::decode(&b))
    }

    /// QUERY_COUNTERS: the port's RoCEv2 counters (interface 1.5).
    pub(crate) fn query_counters(&mut self, bar: &Bar0<'_>) -> Result<hw::PortCounters> {
        let b = self.query::<{ hw::PortCounters::SIZE }>(bar, hw::admin_op::QUERY_COUNTERS, 0)?;
        Ok(hw::PortCounters::decode(&b))
    }

    /// QUERY_QP: the device's view of a QP (its state may have moved to ERR on a fault).
    pub(crate) fn query_qp(&mut self, bar: &Bar0<'_>, id: u32) -> Result<hw::QpQueryOut> {
        let b = self.query::<{ hw::QpQueryOut::SIZE }>(bar, hw::admin_op::QUERY_QP, id)?;
        Ok(hw::QpQueryOut::decode(&b))
    }
}

#[kunit_tests(ferrdma_admin)]
mod tests {
    use super::*;

    #[test]
    fn ring_position_wraps_and_flips_the_phase() {
        let mut p = RingPos::START;
        for _ in 0..3 {
            p = p.advance(4);
        }
        assert_eq!(
            p,
            RingPos {
                tail: 3,
                phase: true
            }
        );
        p = p.advance(4);
        assert_eq!(
            p,
            RingPos {
                tail: 0,
                phase: false
            }
        );
        for _ in 0..4 {
            p = p.advance(4);
        }
        assert_eq!(
            p,
            RingPos {
                tail: 0,
                phase: true
            }
        );
    }

    #[test]
    fn completion_phase_must_match() {
        assert!(completion_ready(hw::ACQ_FLAG_PHASE, true));
        assert!(!completion_ready(0, true));
        assert!(completion_ready(0, false));
        assert!(!completion_ready(hw::ACQ_FLAG_PHASE | 1, false));
    }

    #[test]
    fn admin_statuses_map_to_errnos() {
        use hw::admin_status as s;
        assert!(status_to_error(s::OK).is_ok());
        assert_eq!(status_to_error(s::INVALID), Err(EINVAL));
        assert_eq!(status_to_error(s::NOT_SUPPORTED), Err(EOPNOTSUPP));
        assert_eq!(status_to_error(s::BUSY), Err(EBUSY));
        assert_eq!(status_to_error(s::NOT_FOUND), Err(ENOENT));
        assert_eq!(status_to_error(0xffff), Err(EIO));
    }
}
