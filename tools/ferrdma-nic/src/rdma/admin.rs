//! The admin queue: a command ring and a completion ring in host memory, driven by the
//! `AQ_TAIL` doorbell. The completion for command slot `i` goes to completion slot `i`, with
//! a phase bit that starts at 1 and flips on each wrap.

use crate::interface::{
    aq_status, AdminCompletion, AdminHeader, ACQ_FLAG_PHASE, ADMIN_CMD_SIZE, ADMIN_CPL_SIZE,
    AEQ_VECTOR, AQ_BASE_ALIGN, AQ_CTRL_ENABLE, AQ_CTRL_IRQ, AQ_MAX_ENTRIES, AQ_MIN_ENTRIES,
    REG_ACQ_BASE, REG_AQ_BASE, REG_AQ_CTRL, REG_AQ_HEAD, REG_AQ_SIZE, REG_AQ_STATUS, REG_AQ_TAIL,
};

use super::{Engine, Env};

/// Admin queue registers and position.
#[derive(Debug, Default)]
pub struct AdminQueue {
    base: u64,
    cbase: u64,
    size: u32,
    ctrl: u32,
    head: u32,
    tail: u32,
    phase: bool,
    status: u32,
}

fn set_lo(v: u64, lo: u32) -> u64 {
    (v & !0xffff_ffff) | u64::from(lo)
}

fn set_hi(v: u64, hi: u32) -> u64 {
    (v & 0xffff_ffff) | (u64::from(hi) << 32)
}

impl AdminQueue {
    /// Whether `reg` is an admin queue register.
    pub fn is_reg(&self, reg: usize) -> bool {
        matches!(
            reg,
            REG_AQ_SIZE | REG_AQ_CTRL | REG_AQ_TAIL | REG_AQ_HEAD | REG_AQ_STATUS
        ) || (REG_AQ_BASE..REG_AQ_BASE + 16).contains(&reg)
    }

    /// Register read.
    pub fn read_reg(&self, reg: usize) -> Option<u32> {
        Some(match reg {
            r if r == REG_AQ_BASE => self.base as u32,
            r if r == REG_AQ_BASE + 4 => (self.base >> 32) as u32,
            r if r == REG_ACQ_BASE => self.cbase as u32,
            r if r == REG_ACQ_BASE + 4 => (self.cbase >> 32) as u32,
            REG_AQ_SIZE => self.size,
            REG_AQ_CTRL => self.ctrl,
            REG_AQ_TAIL => self.tail,
            REG_AQ_HEAD => self.head,
            REG_AQ_STATUS => self.status,
            _ => return None,
        })
    }

    fn enabled(&self) -> bool {
        self.ctrl & AQ_CTRL_ENABLE != 0
    }

    fn stop(&mut self, status: u32) {
        self.ctrl &= !AQ_CTRL_ENABLE;
        self.status = status;
    }
}

/// Handles a register write; `true` if commands may be waiting (tail written or enabled).
pub fn write_reg(e: &mut Engine, env: &Env<'_>, reg: usize, value: u32) -> bool {
    let aq = &mut e.aq;
    let running = aq.enabled();
    match reg {
        // Ring geometry is frozen while the queue runs.
        r if r == REG_AQ_BASE && !running => aq.base = set_lo(aq.base, value),
        r if r == REG_AQ_BASE + 4 && !running => aq.base = set_hi(aq.base, value),
        r if r == REG_ACQ_BASE && !running => aq.cbase = set_lo(aq.cbase, value),
        r if r == REG_ACQ_BASE + 4 && !running => aq.cbase = set_hi(aq.cbase, value),
        REG_AQ_SIZE if !running => aq.size = value,
        REG_AQ_CTRL => {
            let enable = value & AQ_CTRL_ENABLE != 0;
            if enable && !running {
                let ok = aq.size.is_power_of_two()
                    && (AQ_MIN_ENTRIES..=AQ_MAX_ENTRIES).contains(&aq.size)
                    && aq.base % AQ_BASE_ALIGN == 0
                    && aq.cbase % AQ_BASE_ALIGN == 0;
                if !ok {
                    aq.ctrl = value & AQ_CTRL_IRQ;
                    aq.status = aq_status::BAD_CONFIG;
                    return false;
                }
                aq.head = 0;
                aq.tail = 0;
                aq.phase = true;
                aq.status = aq_status::OK;
            }
            aq.ctrl = value & (AQ_CTRL_ENABLE | AQ_CTRL_IRQ);
            return false;
        }
        REG_AQ_TAIL => {
            if !running {
                return false;
            }
            if value >= aq.size {
                aq.status = aq_status::BAD_TAIL;
                return false;
            }
            aq.tail = value;
            let _ = env;
            return true;
        }
        _ => log::debug!("AQ register {reg:#x} write {value:#x} ignored"),
    }
    false
}

impl Engine {
    /// Runs every command between head and tail (at most one ring's worth).
    pub(super) fn process_admin(&mut self, env: &Env<'_>) {
        if self.sabotage.admin_stalled() {
            // A hung device (host test knob): the commands wait, unanswered.
            return;
        }
        let mut completed = 0u32;
        while self.aq.enabled() && self.aq.head != self.aq.tail && completed < self.aq.size {
            if !env.bus_master {
                self.aq.stop(aq_status::NO_BUS_MASTER);
                break;
            }
            let head = self.aq.head;
            // The bases are guest values: a ring reaching past 2^64 is a DMA fault, never a
            // wrapped access to low memory.
            let slot = |base: u64, size: usize| base.checked_add(u64::from(head) * size as u64);
            let (Some(cmd_addr), Some(cpl_addr)) = (
                slot(self.aq.base, ADMIN_CMD_SIZE),
                slot(self.aq.cbase, ADMIN_CPL_SIZE).filter(|a| a.checked_add(16).is_some()),
            ) else {
                self.stats.dma_faults += 1;
                self.aq.stop(aq_status::DMA_FAULT);
                break;
            };
            let mut cmd = [0u8; ADMIN_CMD_SIZE];
            if let Err(e) = env.mem.read(cmd_addr, &mut cmd) {
                log::warn!("admin queue: command {head} not readable: {e}");
                self.stats.dma_faults += 1;
                self.aq.stop(aq_status::DMA_FAULT);
                break;
            }
            let hdr = AdminHeader::decode(cmd.first_chunk::<8>().unwrap_or(&[0; 8]));
            let outcome = if self.fatal {
                Err(super::commands::CmdError {
                    status: crate::interface::admin_status::FATAL,
                    detail: 0,
                })
            } else {
                self.execute(env, &cmd)
            };
            let (status, result, detail) = match outcome {
                Ok(result) => (0, result, 0),
                Err(err) => {
                    log::debug!("admin opcode {:#x}: {err:?}", hdr.opcode);
                    self.stats.admin_errors += 1;
                    (err.status, 0, err.detail)
                }
            };
            self.stats.admin_cmds += 1;
            let cpl = AdminCompletion {
                cmd_id: hdr.cmd_id,
                status,
                result,
                detail,
                opcode: hdr.opcode,
                rsvd: 0,
                flags: if self.aq.phase { ACQ_FLAG_PHASE } else { 0 },
            };
            let bytes = cpl.encode();
            // Phase word last.
            let ok = env.mem.write(cpl_addr, &bytes[..12]).is_ok()
                && env.mem.write(cpl_addr + 12, &bytes[12..]).is_ok();
            if !ok {
                log::warn!("admin queue: completion {head} not writable");
                self.stats.dma_faults += 1;
                self.aq.stop(aq_status::DMA_FAULT);
                break;
            }
            self.aq.head = (head + 1) % self.aq.size;
            if self.aq.head == 0 {
                self.aq.phase = !self.aq.phase;
            }
            completed += 1;
        }
        if completed > 0 && self.aq.ctrl & AQ_CTRL_IRQ != 0 {
            self.stats.interrupts += 1;
            if let Err(e) = env.irq.raise(AEQ_VECTOR) {
                log::debug!("admin completion interrupt: {e}");
            }
        }
    }
}
