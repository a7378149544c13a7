//! A userspace test host: guest RAM in a memfd, and a fake driver that programs the device
//! only through its registers, doorbell BAR, rings in guest memory and MSI-X eventfds, the
//! way the kernel driver and libirdma will. The WQE builder follows libirdma's GEN_2 rules
//! (irdma-abi.md §3.4): quanta, polarity, immediate slot, even-count padding, inline layout
//! and NOP padding to 8-quantum chunks.

#![allow(dead_code)]

mod admin_tests;
mod cc_param_tests;
mod cm_path_tests;
mod cq_resize_tests;
mod datapath_tests;
mod error_tests;
mod event_tests;
mod fastreg_tests;
mod fatal_tests;
mod flow_control_tests;
mod fuzz;
mod incast_tests;
mod local_dma_tests;
mod mcast_tests;
mod protection_tests;
mod qkey_tests;
pub(crate) mod vfio_client;
mod vfio_hostile_tests;
mod wire_tests;

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::device::{Device, DMA_MAP_READ, DMA_MAP_WRITE};
use crate::dma::mapping::test_util::memfd;
use crate::interface::*;
use crate::pci::config_space::MSIX_CAP_OFFSET;
use crate::pci::msix::test_util::{count, eventfd};
use crate::shared::SharedDevice;
use crate::vfio::layout::{REGION_BAR0, REGION_CONFIG, REGION_DB};

/// Guest-physical base of guest RAM.
pub const RAM_BASE: u64 = 0x1_0000_0000;
/// Guest RAM size.
pub const RAM_SIZE: u64 = 8 << 20;
/// VA offset of registered memory (iova = gpa + VA_OFFSET), so translation is exercised.
pub const VA_OFFSET: u64 = 0x7f00_0000_0000;
/// Guard bytes before and after guest RAM in the memfd.
pub const GUARD: u64 = 4096;
const GUARD_BYTE: u8 = 0xa5;
/// Admin ring entries.
pub const AQ_ENTRIES: u32 = 8;

/// A decoded CQE as libirdma would read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cqe {
    pub qw: [u64; 4],
    pub ext: Option<[u64; 4]>,
}

impl Cqe {
    pub fn op(&self) -> u8 {
        bits(self.qw[3], cqe::OP_HI, cqe::OP_LO) as u8
    }
    pub fn is_sq(&self) -> bool {
        self.qw[3] >> cqe::SQ & 1 == 1
    }
    pub fn error(&self) -> Option<(u16, u16)> {
        (self.qw[3] >> cqe::ERROR & 1 == 1).then(|| ((self.qw[3] >> 16) as u16, self.qw[3] as u16))
    }
    pub fn wqe_idx(&self) -> u32 {
        bits(self.qw[3], cqe::WQEIDX_HI, cqe::WQEIDX_LO) as u32
    }
    pub fn qp_id(&self) -> u32 {
        bits(self.qw[2], 55, 32) as u32
    }
    pub fn len(&self) -> u32 {
        self.qw[0] as u32
    }
    pub fn imm(&self) -> Option<u32> {
        self.ext
            .filter(|e| e[3] >> cqe::IMMVALID & 1 == 1)
            .map(|e| e[0] as u32)
    }
    pub fn solicited(&self) -> bool {
        self.qw[3] >> cqe::SOEVENT & 1 == 1
    }
}

/// The driver's view of an event queue.
pub struct EqH {
    pub id: u32,
    pub ring: u64,
    pub size: u32,
    pub cons: u32,
    pub pol: bool,
}

/// The driver's view of a CQ.
pub struct CqH {
    pub id: u32,
    pub ring: u64,
    pub shadow: u64,
    pub size: u32,
    pub head: u32,
    pub pol: bool,
    pub db_page: u32,
}

/// The driver's/libirdma's view of a QP.
pub struct QpH {
    pub id: u32,
    pub pd: u32,
    /// Guest-physical addresses of the SQ's pages (discontiguous on purpose).
    pub sq_pages: Vec<u64>,
    pub rq_pages: Vec<u64>,
    pub sq_quanta: u32,
    pub rq_wqes: u32,
    pub rq_shift: u8,
    pub sq_head: u32,
    pub sq_pol: bool,
    pub rq_head: u32,
    pub rq_pol: bool,
    pub db_page: u32,
    pub compl_ctx: u64,
}

impl QpH {
    fn sq_addr(&self, q: u32) -> u64 {
        let off = u64::from(q % self.sq_quanta) * 32;
        self.sq_pages[(off / 4096) as usize] + off % 4096
    }
    fn rq_addr(&self, i: u32) -> u64 {
        let off = u64::from(i % self.rq_wqes) * (32u64 << self.rq_shift);
        self.rq_pages[(off / 4096) as usize] + off % 4096
    }
}

/// One scatter/gather element as the application gives it.
#[derive(Debug, Clone, Copy)]
pub struct Sg {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
}

/// A send work request.
#[derive(Debug, Clone, Default)]
pub struct Wr {
    pub opcode: u8,
    pub signaled: bool,
    pub imm: Option<u32>,
    pub inline: Option<Vec<u8>>,
    pub sges: Vec<Sg>,
    pub hdr_low: u32,
    /// qw0 of one-quantum WQEs (FAST_REG: the iova).
    pub qw0: u64,
    pub qw1: u64,
    pub qw2: u64,
}

/// A registered buffer.
#[derive(Debug, Clone, Copy)]
pub struct Buf {
    pub gpa: u64,
    pub va: u64,
    pub len: u64,
    pub stag: u32,
}

impl Buf {
    pub fn sg(&self, off: u64, len: u32) -> Sg {
        Sg {
            addr: self.va + off,
            len,
            lkey: self.stag,
        }
    }
}

pub struct Host {
    /// The device, shared the way the vfio-user server shares it with its engine thread.
    pub shared: SharedDevice,
    pub ram: File,
    /// Guest RAM bytes (from `RAM_BASE`).
    pub ram_size: u64,
    next: u64,
    irqs: Vec<File>,
    aq: u64,
    acq: u64,
    aq_tail: u32,
    aq_phase: bool,
    cmd_id: u16,
    eq_pages: HashMap<u32, Vec<u64>>,
    mr_pages: HashMap<u32, Vec<u64>>,
}

impl Host {
    /// A device with guest RAM mapped, bus mastering and MSI-X on, vectors wired, the
    /// engine reset and the admin queue running.
    pub fn new() -> Self {
        Self::with_ram(RAM_SIZE)
    }

    /// Like [`Host::new`] with `ram_size` bytes of guest RAM.
    pub fn with_ram(ram_size: u64) -> Self {
        // Guest RAM sits between two guard pages of the memfd that are never mapped to the
        // device; `guards_intact` checks that the device never wrote them.
        let ram = memfd(ram_size + 2 * GUARD);
        ram.write_all_at(&[GUARD_BYTE; GUARD as usize], 0).unwrap();
        ram.write_all_at(&[GUARD_BYTE; GUARD as usize], GUARD + ram_size)
            .unwrap();
        let mut dev = Device::new("testhost");
        dev.dma_map(
            DMA_MAP_READ | DMA_MAP_WRITE,
            GUARD,
            RAM_BASE,
            ram_size,
            Some(ram.try_clone().unwrap()),
        )
        .unwrap();
        let irqs: Vec<File> = (0..MSIX_VECTORS).map(|_| eventfd()).collect();
        dev.set_irqs(
            vfio_bindings::bindings::vfio::VFIO_PCI_MSIX_IRQ_INDEX,
            vfio_bindings::bindings::vfio::VFIO_IRQ_SET_DATA_EVENTFD
                | vfio_bindings::bindings::vfio::VFIO_IRQ_SET_ACTION_TRIGGER,
            0,
            MSIX_VECTORS,
            irqs.iter().map(|f| f.try_clone().unwrap()).collect(),
        )
        .unwrap();
        let mut h = Self {
            shared: SharedDevice::new(dev),
            ram,
            ram_size,
            next: 0x1000,
            irqs,
            aq: 0,
            acq: 0,
            aq_tail: 0,
            aq_phase: true,
            cmd_id: 0,
            eq_pages: HashMap::new(),
            mr_pages: HashMap::new(),
        };
        h.cfg_w16(4, 0x6); // memory + bus master
        h.dev()
            .write_region(REGION_CONFIG, MSIX_CAP_OFFSET as u64 + 3, &[0x80])
            .unwrap();
        assert_eq!(h.reg(REG_FEATURES) & FEATURE_RDMA, FEATURE_RDMA);
        h.set_reg(REG_DEV_CTRL, DEV_CTRL_RESET);
        assert_eq!(h.reg(REG_DEV_STATUS), DEV_STATUS_READY);
        h.aq = h.alloc(u64::from(AQ_ENTRIES) * 128, 4096);
        h.acq = h.alloc(u64::from(AQ_ENTRIES) * 16, 4096);
        h.set_reg64(REG_AQ_BASE, h.aq);
        h.set_reg64(REG_ACQ_BASE, h.acq);
        h.set_reg(REG_AQ_SIZE, AQ_ENTRIES);
        h.set_reg(REG_AQ_CTRL, AQ_CTRL_ENABLE | AQ_CTRL_IRQ);
        assert_eq!(h.reg(REG_AQ_STATUS), aq_status::OK);
        h
    }

    /// The device (locked).
    pub fn dev(&self) -> std::sync::MutexGuard<'_, Device> {
        self.shared.lock()
    }

    /// Whether the guard pages around guest RAM still hold their pattern.
    pub fn guards_intact(&self) -> bool {
        let mut b = vec![0u8; GUARD as usize];
        [0, GUARD + self.ram_size].iter().all(|&off| {
            self.ram.read_exact_at(&mut b, off).unwrap();
            b.iter().all(|&x| x == GUARD_BYTE)
        })
    }

    /// Resets the engine and restarts the admin queue (recovery after hostile input).
    pub fn restart(&mut self) {
        self.cfg_w16(4, 0x6);
        self.set_reg(REG_DEV_CTRL, DEV_CTRL_RESET);
        for i in 0..AQ_ENTRIES {
            self.write(self.acq + u64::from(i) * 16, &[0; 16]);
        }
        self.set_reg64(REG_AQ_BASE, self.aq);
        self.set_reg64(REG_ACQ_BASE, self.acq);
        self.set_reg(REG_AQ_SIZE, AQ_ENTRIES);
        self.set_reg(REG_AQ_CTRL, AQ_CTRL_ENABLE | AQ_CTRL_IRQ);
        self.aq_tail = 0;
        self.aq_phase = true;
    }

    pub fn cfg_w16(&mut self, off: u64, v: u16) {
        self.dev()
            .write_region(REGION_CONFIG, off, &v.to_le_bytes())
            .unwrap();
    }

    /// Bump allocation of zeroed guest memory.
    pub fn alloc(&mut self, len: u64, align: u64) -> u64 {
        let at = self.next.next_multiple_of(align);
        self.next = at + len.max(1);
        assert!(self.next <= self.ram_size, "test host out of guest RAM");
        RAM_BASE + at
    }

    pub fn write(&self, gpa: u64, data: &[u8]) {
        self.ram.write_all_at(data, gpa - RAM_BASE + GUARD).unwrap();
    }

    pub fn read(&self, gpa: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        self.ram
            .read_exact_at(&mut b, gpa - RAM_BASE + GUARD)
            .unwrap();
        b
    }

    pub fn w64(&self, gpa: u64, v: u64) {
        self.write(gpa, &v.to_le_bytes());
    }

    pub fn r64(&self, gpa: u64) -> u64 {
        u64::from_le_bytes(self.read(gpa, 8).try_into().unwrap())
    }

    pub fn reg(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        self.dev()
            .read_region(REGION_BAR0, off as u64, &mut b)
            .unwrap();
        u32::from_le_bytes(b)
    }

    pub fn set_reg(&mut self, off: usize, v: u32) {
        self.dev()
            .write_region(REGION_BAR0, off as u64, &v.to_le_bytes())
            .unwrap();
    }

    pub fn set_reg64(&mut self, off: usize, v: u64) {
        self.set_reg(off, v as u32);
        self.set_reg(off + 4, (v >> 32) as u32);
    }

    pub fn doorbell(&mut self, page: u32, off: usize, v: u32) {
        Self::doorbell_of(&self.shared, page, off, v);
    }

    /// [`Host::doorbell`] from any thread (as the vfio-user server thread rings them).
    pub fn doorbell_of(dev: &SharedDevice, page: u32, off: usize, v: u32) {
        let at = u64::from(page) * DB_PAGE_SIZE as u64 + off as u64;
        dev.lock()
            .write_region(REGION_DB, at, &v.to_le_bytes())
            .unwrap();
    }

    /// Interrupts delivered on `vector` since the last call.
    pub fn irqs(&self, vector: u32) -> u64 {
        count(&self.irqs[vector as usize])
    }

    /// Submits one 128-byte command and returns its completion.
    pub fn admin_raw(&mut self, mut cmd: [u8; 128]) -> AdminCompletion {
        self.cmd_id = self.cmd_id.wrapping_add(1);
        cmd[2..4].copy_from_slice(&self.cmd_id.to_le_bytes());
        let slot = self.aq_tail;
        self.write(self.aq + u64::from(slot) * 128, &cmd);
        self.aq_tail = (slot + 1) % AQ_ENTRIES;
        self.set_reg(REG_AQ_TAIL, self.aq_tail);
        let raw: [u8; 16] = self
            .read(self.acq + u64::from(slot) * 16, 16)
            .try_into()
            .unwrap();
        let c = AdminCompletion::decode(&raw);
        assert_eq!(
            c.flags & ACQ_FLAG_PHASE != 0,
            self.aq_phase,
            "completion {slot} not written (phase)"
        );
        assert_eq!(c.cmd_id, self.cmd_id);
        assert_eq!(self.reg(REG_AQ_HEAD), self.aq_tail);
        if self.aq_tail == 0 {
            self.aq_phase = !self.aq_phase;
        }
        c
    }

    /// Like [`Host::admin_raw`] but tolerant of a queue that hostile register writes have
    /// broken: `None` if no completion appeared (the caller should [`Host::restart`]).
    pub fn admin_try(&mut self, mut cmd: [u8; 128]) -> Option<AdminCompletion> {
        self.cmd_id = self.cmd_id.wrapping_add(1);
        cmd[2..4].copy_from_slice(&self.cmd_id.to_le_bytes());
        let slot = self.aq_tail;
        self.write(self.aq + u64::from(slot) * 128, &cmd);
        self.aq_tail = (slot + 1) % AQ_ENTRIES;
        self.set_reg(REG_AQ_TAIL, self.aq_tail);
        let raw: [u8; 16] = self
            .read(self.acq + u64::from(slot) * 16, 16)
            .try_into()
            .ok()?;
        let c = AdminCompletion::decode(&raw);
        if (c.flags & ACQ_FLAG_PHASE != 0) != self.aq_phase || c.cmd_id != self.cmd_id {
            return None;
        }
        if self.aq_tail == 0 {
            self.aq_phase = !self.aq_phase;
        }
        Some(c)
    }

    /// Submits a command; returns its status.
    pub fn admin(&mut self, cmd: [u8; 128]) -> u16 {
        self.admin_raw(cmd).status
    }

    pub fn hdr(op: u8) -> AdminHeader {
        AdminHeader {
            opcode: op,
            ..Default::default()
        }
    }

    /// Guest memory aligned to `align` holding `values` as little-endian u64s (page lists).
    pub fn alloc_u64s(&mut self, values: &[u64], align: u64) -> u64 {
        let at = self.alloc(8 * values.len() as u64, align);
        let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.write(at, &raw);
        at
    }

    /// Describes `pages` (4 KiB each) as a level-1 list (or level 0 if one page).
    pub fn page_list(&mut self, pages: &[u64]) -> PageList {
        if pages.len() == 1 {
            return PageList {
                addr: pages[0],
                npages: 1,
                level: PBL_LEVEL_CONTIG,
                ..Default::default()
            };
        }
        let list = self.alloc_u64s(pages, 4096);
        PageList {
            addr: list,
            npages: pages.len() as u32,
            level: PBL_LEVEL_1,
            ..Default::default()
        }
    }

    /// `n` separate 4 KiB pages with a one-page gap between them (so they are not
    /// contiguous and page-list translation matters).
    pub fn scattered_pages(&mut self, n: u32) -> Vec<u64> {
        (0..n)
            .map(|_| {
                let p = self.alloc(4096, 4096);
                self.alloc(4096, 4096);
                p
            })
            .collect()
    }

    pub fn create_eq(&mut self, id: u32, kind: u8, vector: u32, size: u32) -> EqH {
        self.create_eq_moderated(id, kind, vector, size, 0)
    }

    /// [`Host::create_eq`] with an interrupt moderation interval.
    pub fn create_eq_moderated(
        &mut self,
        id: u32,
        kind: u8,
        vector: u32,
        size: u32,
        moderation_us: u16,
    ) -> EqH {
        let pages = (u64::from(size) * 16).div_ceil(4096) as u32;
        let pl = self.scattered_pages(pages);
        let ring = self.page_list(&pl);
        let st = self.admin(
            CreateEq {
                hdr: Self::hdr(admin_op::CREATE_EQ),
                eq_id: id,
                size,
                vector,
                kind,
                moderation_us,
                ring,
                ..Default::default()
            }
            .encode(),
        );
        assert_eq!(st, admin_status::OK, "CREATE_EQ");
        // The test's EQ rings are contiguous in index space per page; remember page 0 and
        // read through the page list.
        self.eq_pages.insert(id, pl.clone());
        EqH {
            id,
            ring: pl[0],
            size,
            cons: 0,
            pol: true,
        }
    }

    fn eq_addr(&self, eq: &EqH, i: u32) -> u64 {
        let off = u64::from(i) * 16;
        self.eq_pages[&eq.id][(off / 4096) as usize] + off % 4096
    }

    /// Consumes every valid entry of `eq` (no doorbell).
    pub fn poll_eq(&self, eq: &mut EqH) -> Vec<Eqe> {
        let mut out = Vec::new();
        for _ in 0..eq.size {
            let raw: [u8; 16] = self.read(self.eq_addr(eq, eq.cons), 16).try_into().unwrap();
            let e = Eqe::decode(&raw);
            if (e.flags & EQE_FLAG_VALID != 0) != eq.pol {
                break;
            }
            out.push(e);
            eq.cons += 1;
            if eq.cons == eq.size {
                eq.cons = 0;
                eq.pol = !eq.pol;
            }
        }
        out
    }

    pub fn arm_eq(&mut self, eq: &EqH) {
        self.set_reg(REG_EQ_DOORBELL, eq_doorbell(eq.id, eq.cons, true));
    }

    /// Standard setup: AEQ (id 0, vector 0, 64 entries) and CEQ (id 1, vector 1, 64),
    /// both armed; link up; GID 0 = ::ffff:10.0.0.1.
    pub fn standard(&mut self) -> (EqH, EqH) {
        let aeq = self.create_eq(0, EQ_KIND_AEQ, 0, 64);
        let ceq = self.create_eq(1, EQ_KIND_CEQ, 1, 64);
        self.arm_eq(&aeq);
        self.arm_eq(&ceq);
        let port = SetPort {
            hdr: Self::hdr(admin_op::SET_PORT),
            mac: [2, 0, 0, 0, 0, 1],
            link: LINK_UP,
            mtu: 3,
            ..Default::default()
        };
        assert_eq!(self.admin(port.encode()), admin_status::OK);
        assert_eq!(
            self.admin(gid_cmd(admin_op::ADD_GID, 0, GID0)),
            admin_status::OK
        );
        (aeq, ceq)
    }

    /// The event tag [`Self::create_cq`] gives CQ `id`.
    pub const fn cq_tag(id: u32) -> u32 {
        0xc0_0000 | id
    }

    /// The event tag [`Self::create_qp`] gives QP `id`.
    pub const fn qp_tag(id: u32) -> u32 {
        0x9b_0000 | id
    }

    pub fn create_cq(&mut self, id: u32, size: u32, eq: u32) -> CqH {
        self.create_cq_tagged(id, size, eq, Self::cq_tag(id))
    }

    pub fn create_cq_tagged(&mut self, id: u32, size: u32, eq: u32, event_tag: u32) -> CqH {
        let pages = (u64::from(size) * 32).div_ceil(4096) as u32;
        // One contiguous ring (CQ buffers of libirdma are one allocation) plus shadow.
        let ring = self.alloc(u64::from(pages) * 4096 + 64, 4096);
        let shadow = ring + u64::from(pages) * 4096;
        let st = self.admin(
            CreateCq {
                hdr: Self::hdr(admin_op::CREATE_CQ),
                cq_id: id,
                size,
                eq_id: eq,
                db_page: 1,
                shadow_addr: shadow,
                ring: PageList {
                    addr: ring,
                    npages: pages,
                    level: PBL_LEVEL_CONTIG,
                    ..Default::default()
                },
                event_tag,
                ..Default::default()
            }
            .encode(),
        );
        assert_eq!(st, admin_status::OK, "CREATE_CQ");
        CqH {
            id,
            ring,
            shadow,
            size,
            head: 0,
            pol: true,
            db_page: 1,
        }
    }

    fn cqe_at(&self, cq: &CqH, i: u32) -> [u64; 4] {
        let b = self.read(cq.ring + u64::from(i) * 32, 32);
        let mut q = [0u64; 4];
        for (k, c) in b.chunks_exact(8).enumerate() {
            q[k] = u64::from_le_bytes(c.try_into().unwrap());
        }
        q
    }

    /// Polls every valid CQE, like libirdma: checks the extension's own polarity and
    /// stores the head in shadow qw0.
    pub fn poll_cq(&self, cq: &mut CqH) -> Vec<Cqe> {
        self.poll_cq_n(cq, cq.size)
    }

    /// [`Host::poll_cq`] taking at most `max` CQEs (`ibv_poll_cq(cq, max, ...)`).
    pub fn poll_cq_n(&self, cq: &mut CqH, max: u32) -> Vec<Cqe> {
        let mut out = Vec::new();
        for _ in 0..max.min(cq.size) {
            let qw = self.cqe_at(cq, cq.head);
            if (qw[3] >> 63 == 1) != cq.pol {
                break;
            }
            let mut ext = None;
            let mut adv = 1;
            if qw[3] >> cqe::EXTCQE & 1 == 1 {
                let next = (cq.head + 1) % cq.size;
                let e = self.cqe_at(cq, next);
                let epol = if next == 0 { !cq.pol } else { cq.pol };
                assert_eq!(e[3] >> 63 == 1, epol, "extension slot polarity");
                ext = Some(e);
                adv = 2;
            }
            out.push(Cqe { qw, ext });
            for _ in 0..adv {
                cq.head += 1;
                if cq.head == cq.size {
                    cq.head = 0;
                    cq.pol = !cq.pol;
                }
            }
            self.w64(cq.shadow, u64::from(cq.head));
        }
        out
    }

    /// `ibv_req_notify_cq`: libirdma's arm sequence.
    pub fn arm_cq(&mut self, cq: &CqH, solicited_only: bool) {
        self.write_arm_word(cq, solicited_only);
        self.doorbell(cq.db_page, DB_CQ_ARM_OFFSET, cq.id);
    }

    /// The first half of an arm, as libirdma does it: the next sequence number and the arm
    /// kind into shadow qw4. The doorbell is the caller's.
    pub fn write_arm_word(&mut self, cq: &CqH, solicited_only: bool) {
        let w = self.r64(cq.shadow + 32);
        let seq = ((w >> 16) + 1) & 3;
        let mut nw = (w & 0x3fff) | (seq << 16) | (1 << 15);
        if !solicited_only {
            nw |= 1 << 14;
        }
        self.w64(cq.shadow + 32, nw);
    }

    pub fn reg_mr(&mut self, stag: u32, pd: u32, access: u32, len: u64) -> Buf {
        let pages = (len + 0x800).div_ceil(4096) as u32;
        let pl = self.scattered_pages(pages);
        let list = self.page_list(&pl);
        // The buffer starts at offset 0x800 of the first page; the gpa view only works for
        // the first page, so data is written through `buf_write`.
        let va = VA_OFFSET + pl[0] + 0x800;
        let st = self.admin(
            RegMr {
                hdr: Self::hdr(admin_op::REG_MR),
                stag,
                pd,
                access,
                page_shift: 12,
                iova: va,
                length: len,
                pages: list,
                ..Default::default()
            }
            .encode(),
        );
        assert_eq!(st, admin_status::OK, "REG_MR");
        self.mr_pages.insert(stag, pl.clone());
        Buf {
            gpa: pl[0] + 0x800,
            va,
            len,
            stag,
        }
    }

    fn buf_gpa(&self, b: &Buf, off: u64) -> u64 {
        let o = 0x800 + off;
        self.mr_pages[&b.stag][(o / 4096) as usize] + o % 4096
    }

    /// Writes into a registered buffer through its scattered pages.
    pub fn buf_write(&self, b: &Buf, off: u64, data: &[u8]) {
        for (i, byte) in data.iter().enumerate() {
            self.write(self.buf_gpa(b, off + i as u64), &[*byte]);
        }
    }

    pub fn buf_read(&self, b: &Buf, off: u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| self.read(self.buf_gpa(b, off + i as u64), 1)[0])
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    pub fn create_qp(
        &mut self,
        id: u32,
        ty: u8,
        pd: u32,
        scq: u32,
        rcq: u32,
        sq_quanta: u32,
        rq_wqes: u32,
        rq_shift: u8,
    ) -> QpH {
        self.create_qp_flags(0, id, ty, pd, scq, rcq, sq_quanta, rq_wqes, rq_shift)
    }

    /// [`Host::create_qp`] with `CreateQp::flags` (e.g. [`QP_FLAG_PRIVILEGED`]).
    #[allow(clippy::too_many_arguments)]
    pub fn create_qp_flags(
        &mut self,
        flags: u32,
        id: u32,
        ty: u8,
        pd: u32,
        scq: u32,
        rcq: u32,
        sq_quanta: u32,
        rq_wqes: u32,
        rq_shift: u8,
    ) -> QpH {
        let sqp = (u64::from(sq_quanta) * 32).div_ceil(4096) as u32;
        let rqp = ((u64::from(rq_wqes) * 32) << rq_shift).div_ceil(4096) as u32;
        let sq_pages = self.scattered_pages(sqp);
        let rq_pages = self.scattered_pages(rqp);
        let shadow = self.alloc(64, 64);
        let sq_ring = self.page_list(&sq_pages);
        let rq_ring = self.page_list(&rq_pages);
        let compl_ctx = 0xc0de_0000_0000 | u64::from(id);
        let st = self.admin(
            CreateQp {
                hdr: Self::hdr(admin_op::CREATE_QP),
                qp_id: id,
                pd,
                send_cq: scq,
                recv_cq: rcq,
                qp_type: ty,
                rq_shift,
                db_page: 1,
                sq_quanta,
                rq_wqes,
                sq_ring,
                rq_ring,
                shadow_addr: shadow,
                compl_ctx,
                flags,
                event_tag: Self::qp_tag(id),
                ..Default::default()
            }
            .encode(),
        );
        assert_eq!(st, admin_status::OK, "CREATE_QP");
        QpH {
            id,
            pd,
            sq_pages,
            rq_pages,
            sq_quanta,
            rq_wqes,
            rq_shift,
            sq_head: 0,
            sq_pol: true,
            rq_head: 0,
            rq_pol: true,
            db_page: 1,
            compl_ctx,
        }
    }

    pub fn modify(&mut self, qp: u32, mask: u32, attrs: QpAttrs) -> u16 {
        self.admin(
            ModifyQp {
                hdr: Self::hdr(admin_op::MODIFY_QP),
                qp_id: qp,
                attr_mask: mask,
                attrs,
                ..Default::default()
            }
            .encode(),
        )
    }

    /// RESET -> INIT -> RTR -> RTS for an RC QP connected to `dest` on GID 0.
    pub fn connect_rc(&mut self, qp: u32, dest: u32, access: u32) {
        let st = |s: u8| QpAttrs {
            state: s,
            access,
            dest_qpn: dest,
            dgid: GID0,
            path_mtu: 3,
            rnr_retry: 7,
            retry_cnt: 7,
            ..Default::default()
        };
        assert_eq!(
            self.modify(qp, qp_attr::STATE | qp_attr::ACCESS, st(qp_state::INIT)),
            0
        );
        assert_eq!(
            self.modify(
                qp,
                qp_attr::STATE
                    | qp_attr::AV
                    | qp_attr::DEST_QPN
                    | qp_attr::PATH_MTU
                    | qp_attr::RQ_PSN,
                st(qp_state::RTR)
            ),
            0
        );
        assert_eq!(
            self.modify(
                qp,
                qp_attr::STATE | qp_attr::RETRY_CNT | qp_attr::RNR_RETRY | qp_attr::SQ_PSN,
                st(qp_state::RTS)
            ),
            0
        );
    }

    pub fn ud_to_rts(&mut self, qp: u32, qkey: u32) {
        let st = |s: u8| QpAttrs {
            state: s,
            qkey,
            ..Default::default()
        };
        assert_eq!(
            self.modify(qp, qp_attr::STATE | qp_attr::QKEY, st(qp_state::INIT)),
            0
        );
        assert_eq!(self.modify(qp, qp_attr::STATE, st(qp_state::RTR)), 0);
        assert_eq!(self.modify(qp, qp_attr::STATE, st(qp_state::RTS)), 0);
    }

    fn put_quantum(&self, qp: &QpH, q: u32, words: [u64; 4]) {
        let b: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        self.write(qp.sq_addr(q), &b);
    }

    fn frag(sg: &Sg, pol: bool) -> [u64; 2] {
        [
            sg.addr,
            (u64::from(pol) << 63) | (u64::from(sg.len) << 32) | u64::from(sg.lkey),
        ]
    }

    /// Writes one WR the way libirdma does (with NOP padding); returns its first quantum.
    pub fn post_send(&mut self, qp: &mut QpH, wr: &Wr) -> u32 {
        let imm_slot = wr.imm.is_some() && wr.inline.is_none();
        let frag_cnt = wr.sges.len() as u32 + u32::from(imm_slot);
        let (quanta, addfrag) = if let Some(d) = &wr.inline {
            let l = d.len() as u32;
            (if l <= 8 { 1 } else { 1 + (l - 8).div_ceil(31) }, 0)
        } else if matches!(wr.opcode, sq_op::NOP | sq_op::LOCAL_INV | sq_op::FAST_REG) {
            (1, 0)
        } else {
            let mut add = frag_cnt.max(1) - 1;
            if frag_cnt % 2 == 0 && frag_cnt > 0 {
                add += 1;
            }
            (1 + add.div_ceil(2), add)
        };
        let avail = 8 - qp.sq_head % 8;
        if quanta > avail {
            for _ in 0..avail {
                let hdr = (u64::from(qp.sq_pol) << 63) | (u64::from(sq_op::NOP) << 32);
                self.put_quantum(qp, qp.sq_head, [0, 0, 0, 0]);
                self.write(qp.sq_addr(qp.sq_head) + 24, &hdr.to_le_bytes());
                self.adv_sq(qp, 1);
            }
        }
        let start = qp.sq_head;
        let pol = qp.sq_pol;
        let mut bytes = vec![0u8; quanta as usize * 32];
        let mut put = |at: usize, v: u64| bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
        put(16, wr.qw2);
        if let Some(d) = &wr.inline {
            if let Some(imm) = wr.imm {
                put(0, u64::from(imm));
            }
            for (i, byte) in d.iter().enumerate() {
                let at = if i < 8 {
                    8 + i
                } else {
                    32 * (1 + (i - 8) / 31) + (i - 8) % 31
                };
                bytes[at] = *byte;
            }
            for q in 1..quanta as usize {
                bytes[32 * q + 31] = u8::from(pol) << 7;
            }
        } else if matches!(wr.opcode, sq_op::NOP | sq_op::LOCAL_INV | sq_op::FAST_REG) {
            put(0, wr.qw0);
            put(8, wr.qw1);
        } else {
            let mut slots: Vec<[u64; 2]> = Vec::new();
            if let Some(imm) = wr.imm {
                slots.push([u64::from(imm), 0]);
            }
            for s in &wr.sges {
                slots.push(Self::frag(s, pol));
            }
            if slots.is_empty() {
                slots.push([0, u64::from(pol) << 63]);
            }
            while (slots.len() as u32) < addfrag + 1 {
                slots.push([0, u64::from(pol) << 63]);
            }
            for (k, s) in slots.iter().enumerate() {
                let at = if k == 0 { 0 } else { 16 + 16 * k };
                put(at, s[0]);
                if !(k == 0 && imm_slot) {
                    put(at + 8, s[1]);
                }
            }
            for q in 1..quanta as usize {
                // Every quantum's qw3 carries the valid bit (fragments or zero padding).
                let at = 32 * q + 24;
                let v = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
                bytes[at..at + 8].copy_from_slice(&(v | (u64::from(pol) << 63)).to_le_bytes());
            }
        }
        let mut hdr = (u64::from(pol) << 63)
            | (u64::from(wr.signaled) << 62)
            | (u64::from(wr.imm.is_some()) << 47)
            | (u64::from(addfrag) << 38)
            | (u64::from(wr.opcode) << 32)
            | u64::from(wr.hdr_low);
        if let Some(d) = &wr.inline {
            hdr |= (1 << 57) | ((d.len() as u64) << 48);
        }
        // Body first, header last.
        for q in 0..quanta {
            let chunk = &bytes[q as usize * 32..q as usize * 32 + 32];
            let len = if q == 0 { 24 } else { 32 };
            self.write(qp.sq_addr(start + q), &chunk[..len]);
        }
        self.write(qp.sq_addr(start) + 24, &hdr.to_le_bytes());
        self.adv_sq(qp, quanta);
        start
    }

    fn adv_sq(&self, qp: &mut QpH, n: u32) {
        for _ in 0..n {
            qp.sq_head += 1;
            if qp.sq_head == qp.sq_quanta {
                qp.sq_head = 0;
                qp.sq_pol = !qp.sq_pol;
            }
        }
    }

    pub fn ring_sq(&mut self, qp: &QpH) {
        self.doorbell(qp.db_page, DB_SQ_OFFSET, qp.id);
    }

    /// post_send + doorbell.
    pub fn send(&mut self, qp: &mut QpH, wr: &Wr) -> u32 {
        let s = self.post_send(qp, wr);
        self.ring_sq(qp);
        s
    }

    /// Posts a receive WQE (libirdma layout); returns its index.
    pub fn post_recv(&mut self, qp: &mut QpH, sges: &[Sg]) -> u32 {
        let idx = qp.rq_head;
        let size = 32usize << qp.rq_shift;
        let pol = qp.rq_pol;
        let mut b = vec![0u8; size];
        let mut slots: Vec<[u64; 2]> = sges.iter().map(|s| Self::frag(s, pol)).collect();
        if slots.is_empty() {
            slots.push([0, u64::from(pol) << 63]);
        }
        let mut add = slots.len() as u32 - 1;
        if sges.len() % 2 == 0 && !sges.is_empty() {
            add += 1;
            slots.push([0, u64::from(pol) << 63]);
        }
        for (k, s) in slots.iter().enumerate() {
            let at = if k == 0 { 0 } else { 16 + 16 * k };
            if at + 16 <= size {
                b[at..at + 8].copy_from_slice(&s[0].to_le_bytes());
                b[at + 8..at + 16].copy_from_slice(&s[1].to_le_bytes());
            }
        }
        let hdr = (u64::from(pol) << 63) | (u64::from(add) << 38);
        b[24..32].copy_from_slice(&hdr.to_le_bytes());
        let addr = qp.rq_addr(idx);
        self.write(addr, &b[..24]);
        if size > 32 {
            self.write(addr + 32, &b[32..]);
        }
        self.write(addr + 24, &b[24..32]);
        qp.rq_head += 1;
        if qp.rq_head == qp.rq_wqes {
            qp.rq_head = 0;
            qp.rq_pol = !qp.rq_pol;
        }
        idx
    }

    /// Runs the query admin command `op` on object `id` into a fresh buffer of `N` bytes,
    /// asserts it succeeded and returns the output.
    fn query<const N: usize>(&mut self, op: u8, id: u32) -> [u8; N] {
        let out = self.alloc(N as u64, 8);
        let st = self.admin(
            QueryObject {
                hdr: Self::hdr(op),
                id,
                out_len: N as u32,
                out_addr: out,
                ..Default::default()
            }
            .encode(),
        );
        assert_eq!(st, 0);
        self.read(out, N).try_into().unwrap()
    }

    pub fn caps(&mut self) -> Caps {
        Caps::decode(&self.query(admin_op::QUERY_CAPS, 0))
    }

    pub fn stats(&mut self) -> Stats {
        Stats::decode(&self.query(admin_op::QUERY_STATS, 0))
    }

    pub fn counters(&mut self) -> PortCounters {
        PortCounters::decode(&self.query(admin_op::QUERY_COUNTERS, 0))
    }

    pub fn query_qp(&mut self, id: u32) -> QpQueryOut {
        QpQueryOut::decode(&self.query(admin_op::QUERY_QP, id))
    }

    pub fn object(op: u8, id: u32) -> [u8; 128] {
        QueryObject {
            hdr: Self::hdr(op),
            id,
            ..Default::default()
        }
        .encode()
    }
}

/// GID 0 of the test host: ::ffff:10.0.0.1.
pub const GID0: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1];

pub fn gid_cmd(op: u8, index: u32, gid: [u8; 16]) -> [u8; 128] {
    GidCmd {
        hdr: Host::hdr(op),
        index,
        gid,
        mac: [2, 0, 0, 0, 0, 1],
        ..Default::default()
    }
    .encode()
}

/// A whole RC loopback rig: AEQ, CEQ, one CQ per direction, two connected RC QPs (2 and
/// 3) in PD 1, and two MRs (local write + remote read/write) of 64 KiB each.
pub struct Rig {
    pub h: Host,
    pub aeq: EqH,
    pub ceq: EqH,
    pub cq_a: CqH,
    pub cq_b: CqH,
    pub a: QpH,
    pub b: QpH,
    pub buf_a: Buf,
    pub buf_b: Buf,
    /// `CreateQp::flags` of QPs A and B.
    pub qp_flags: u32,
}

impl Rig {
    pub fn rc() -> Self {
        Self::rc_flags(0)
    }

    /// [`Rig::rc`] with both QPs created with `flags`.
    pub fn rc_flags(flags: u32) -> Self {
        Self::rc_on(Host::new(), flags)
    }

    /// [`Rig::rc_flags`] on `h`, whose admin queue runs and which has no objects yet.
    pub fn rc_on(mut h: Host, flags: u32) -> Self {
        let (mut aeq, ceq) = h.standard();
        // Setup events (PORT_ACTIVE) are not what tests look for.
        h.poll_eq(&mut aeq);
        h.arm_eq(&aeq);
        let cq_a = h.create_cq(1, 64, 1);
        let cq_b = h.create_cq(2, 64, 1);
        let a = h.create_qp_flags(flags, 2, QP_TYPE_RC, 1, 1, 1, 512, 64, 2);
        let b = h.create_qp_flags(flags, 3, QP_TYPE_RC, 1, 2, 2, 512, 64, 2);
        let all = QP_ACCESS_REMOTE_READ | QP_ACCESS_REMOTE_WRITE;
        h.connect_rc(2, 3, all);
        h.connect_rc(3, 2, all);
        let acc = MR_ACCESS_LOCAL_WRITE | MR_ACCESS_REMOTE_READ | MR_ACCESS_REMOTE_WRITE;
        let buf_a = h.reg_mr(0x100 | 0x11, 1, acc, 0x10000);
        let buf_b = h.reg_mr(0x200 | 0x22, 1, acc, 0x10000);
        Self {
            h,
            aeq,
            ceq,
            cq_a,
            cq_b,
            a,
            b,
            buf_a,
            buf_b,
            qp_flags: flags,
        }
    }
}

impl Rig {
    /// Posts `wr` on QP A and returns the error of the first completion on A's CQ.
    pub fn first_error(&mut self, wr: &Wr) -> Option<(u16, u16)> {
        self.h.send(&mut self.a, wr);
        self.h.poll_cq(&mut self.cq_a)[0].error()
    }

    /// Posts a 64-byte receive on QP B and a SEND with invalidate of `stag` carrying the
    /// first `len` bytes of `buf_a` on QP A.
    pub fn send_inv(&mut self, stag: u32, len: u32) {
        self.h.post_recv(&mut self.b, &[self.buf_b.sg(0, 64)]);
        self.h.send(
            &mut self.a,
            &Wr {
                opcode: sq_op::SEND_INV,
                signaled: true,
                sges: vec![self.buf_a.sg(0, len)],
                hdr_low: stag,
                ..Default::default()
            },
        );
    }
}

/// A byte pattern depending on position and seed.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// A benchmark's or experiment's knob: environment variable `name` parsed as `T`, `default`
/// when unset or unparsable (the ignored benches and `make incast` read theirs this way).
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
