//! Fast registration (manual, "Fast registration"): ALLOC_MR makes an invalid MR table entry,
//! a privileged QP's FAST_REG WQE installs a translation under a new key, LOCAL_INV and SEND
//! with invalidate make it invalid again.

use super::*;

/// Index 5 of the MR table, in PD 1 (the rig's PD).
const FR_INDEX: u32 = 5;
const ALL: u32 = MR_ACCESS_LOCAL_WRITE | MR_ACCESS_REMOTE_READ | MR_ACCESS_REMOTE_WRITE;

fn alloc_mr(h: &mut Host, stag: u32, pd: u32, max_pages: u32) -> AdminCompletion {
    h.admin_raw(
        AllocMr {
            hdr: Host::hdr(admin_op::ALLOC_MR),
            stag,
            pd,
            max_pages,
            ..Default::default()
        }
        .encode(),
    )
}

/// Memory a kernel ULP maps into a fast-registration MR: scattered 4 KiB pages, the page
/// list in guest memory, the iova the first byte's bus address (as `ib_sg_to_pages` sets it).
struct Region {
    pages: Vec<u64>,
    list: u64,
    iova: u64,
    len: u64,
}

fn region(h: &mut Host, n: u32) -> Region {
    let pages = h.scattered_pages(n);
    let list = h.alloc_u64s(&pages, 8);
    Region {
        iova: pages[0] + 0x100,
        len: u64::from(n) * 4096 - 0x300,
        pages,
        list,
    }
}

impl Region {
    fn gpa(&self, off: u64) -> u64 {
        let o = 0x100 + off;
        self.pages[(o / 4096) as usize] + o % 4096
    }
    fn read(&self, h: &Host, off: u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| h.read(self.gpa(off + i as u64), 1)[0])
            .collect()
    }
    fn write(&self, h: &Host, off: u64, data: &[u8]) {
        for (i, b) in data.iter().enumerate() {
            h.write(self.gpa(off + i as u64), &[*b]);
        }
    }
}

/// A FAST_REG WQE's qw2: `length` bytes over `npages` pages of `1 << page_shift` bytes, with MR
/// rights `access`.
fn qw2(length: u64, page_shift: u8, access: u32, npages: u32) -> u64 {
    fast_reg_qw2(FastRegFields {
        length,
        page_shift,
        access,
        npages,
        ..Default::default()
    })
}

fn fast_reg(stag: u32, r: &Region, access: u32, npages: u32) -> Wr {
    Wr {
        opcode: sq_op::FAST_REG,
        signaled: true,
        hdr_low: stag,
        qw0: r.iova,
        qw1: r.list,
        qw2: qw2(r.len, 12, access, npages),
        ..Default::default()
    }
}

/// A privileged rig with a fast-registration MR (index 5, key 0x01, max 8 pages) in PD 1
/// and a 3-page region to map into it.
fn rig() -> (Rig, Region) {
    rig_with(QP_FLAG_PRIVILEGED, 8)
}

/// [`rig`] with QPs made with `flags` and an MR of at most `max_pages` pages.
fn rig_with(flags: u32, max_pages: u32) -> (Rig, Region) {
    let mut r = Rig::rc_flags(flags);
    let c = alloc_mr(&mut r.h, (FR_INDEX << 8) | 1, 1, max_pages);
    assert_eq!(c.status, admin_status::OK);
    let reg = region(&mut r.h, 3);
    (r, reg)
}

/// Posts `wr` on QP B and returns B's first completion.
fn on_b(r: &mut Rig, wr: &Wr) -> Cqe {
    r.h.send(&mut r.b, wr);
    let c = r.h.poll_cq(&mut r.cq_b);
    assert_eq!(c.len(), 1, "{c:?}");
    c[0]
}

fn write_wr(rkey: u32, va: u64, src: Sg) -> Wr {
    Wr {
        opcode: sq_op::RDMA_WRITE,
        signaled: true,
        sges: vec![src],
        hdr_low: rkey,
        qw2: va,
        ..Default::default()
    }
}

#[test]
fn fast_reg_then_write_and_read_through_the_new_rkey() {
    let (mut r, reg) = rig();
    let stag = (FR_INDEX << 8) | 0x02;
    // Before FAST_REG the MR is invalid: a WRITE through it is refused at the responder.
    let w = write_wr(stag, reg.iova, r.buf_a.sg(0, 16));
    assert_eq!(
        r.first_error(&w),
        Some((cqe::MAJERR_FLUSH, flush::REM_ACCESS))
    );
    // A fresh rig for the happy path (the failed WRITE put A in ERR).
    let (mut r, reg) = rig();
    let c = on_b(&mut r, &fast_reg(stag, &reg, ALL, 3));
    assert_eq!(
        (c.op(), c.error(), c.is_sq()),
        (sq_op::FAST_REG, None, true)
    );
    let data = pattern(0x2000, 7);
    r.h.buf_write(&r.buf_a, 0, &data);
    r.h.send(
        &mut r.a,
        &write_wr(stag, reg.iova + 0x80, r.buf_a.sg(0, 0x2000)),
    );
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!((c[0].op(), c[0].error()), (sq_op::RDMA_WRITE, None));
    assert_eq!(reg.read(&r.h, 0x80, 0x2000), data);
    // READ of the region's tail (spans the last two pages) back into A.
    let tail = pattern(0x1800, 9);
    reg.write(&r.h, reg.len - 0x1800, &tail);
    r.h.send(
        &mut r.a,
        &Wr {
            opcode: sq_op::RDMA_READ,
            signaled: true,
            sges: vec![r.buf_a.sg(0x4000, 0x1800)],
            hdr_low: stag,
            qw2: reg.iova + reg.len - 0x1800,
            ..Default::default()
        },
    );
    let c = r.h.poll_cq(&mut r.cq_a);
    assert_eq!(
        (c[0].op(), c[0].error(), c[0].len()),
        (sq_op::RDMA_READ, None, 0x1800)
    );
    assert_eq!(r.h.buf_read(&r.buf_a, 0x4000, 0x1800), tail);
    // One byte past the registered length is refused.
    assert_eq!(
        r.first_error(&write_wr(stag, reg.iova + reg.len, r.buf_a.sg(0, 1))),
        Some((cqe::MAJERR_FLUSH, flush::REM_ACCESS))
    );
    assert!(r.h.guards_intact());
}

#[test]
fn local_inv_then_reregister_with_a_new_key_refuses_the_old_one() {
    let (mut r, reg) = rig();
    let old = (FR_INDEX << 8) | 0x02;
    let new = (FR_INDEX << 8) | 0x03;
    assert_eq!(on_b(&mut r, &fast_reg(old, &reg, ALL, 3)).error(), None);
    let inv = |stag: u32| Wr {
        opcode: sq_op::LOCAL_INV,
        signaled: true,
        qw1: u64::from(stag),
        ..Default::default()
    };
    assert_eq!(on_b(&mut r, &inv(old)).error(), None);
    // Invalid now: the old key no longer works.
    assert_eq!(
        r.first_error(&write_wr(old, reg.iova, r.buf_a.sg(0, 8))),
        Some((cqe::MAJERR_FLUSH, flush::REM_ACCESS))
    );

    let (mut r, reg) = rig();
    assert_eq!(on_b(&mut r, &fast_reg(old, &reg, ALL, 3)).error(), None);
    assert_eq!(on_b(&mut r, &inv(old)).error(), None);
    // Re-register under the next key, with a smaller region and read-only rights.
    let small = Region {
        len: 0x800,
        pages: reg.pages.clone(),
        ..reg
    };
    let c = on_b(&mut r, &fast_reg(new, &small, MR_ACCESS_REMOTE_READ, 1));
    assert_eq!(c.error(), None);
    let q = r.h.query_qp(3);
    assert_eq!(q.attrs.state, qp_state::RTS);
    let dst = r.buf_a.sg(0, 0x10);
    let read = |key: u32| Wr {
        opcode: sq_op::RDMA_READ,
        signaled: true,
        sges: vec![dst],
        hdr_low: key,
        qw2: small.iova,
        ..Default::default()
    };
    // The new key reads; writing is not granted any more.
    assert_eq!(r.first_error(&read(new)), None);
    // The old key is refused.
    assert_eq!(
        r.first_error(&read(old)),
        Some((cqe::MAJERR_FLUSH, flush::REM_ACCESS))
    );
}

#[test]
fn write_with_the_new_key_lacking_rights_is_refused() {
    let (mut r, reg) = rig();
    let stag = (FR_INDEX << 8) | 0x09;
    assert_eq!(
        on_b(&mut r, &fast_reg(stag, &reg, MR_ACCESS_REMOTE_READ, 3)).error(),
        None
    );
    assert_eq!(
        r.first_error(&write_wr(stag, reg.iova, r.buf_a.sg(0, 8))),
        Some((cqe::MAJERR_FLUSH, flush::REM_ACCESS))
    );
}

#[test]
fn send_with_invalidate_invalidates_a_fast_reg_rkey_at_the_responder() {
    let (mut r, reg) = rig();
    let stag = (FR_INDEX << 8) | 0x44;
    assert_eq!(on_b(&mut r, &fast_reg(stag, &reg, ALL, 3)).error(), None);
    r.send_inv(stag, 32);
    assert_eq!(r.h.poll_cq(&mut r.cq_a)[0].error(), None);
    let c = r.h.poll_cq(&mut r.cq_b);
    assert_eq!(c[0].error(), None);
    assert_eq!(c[0].qw[3] >> cqe::STAG_INV & 1, 1, "{c:?}");
    assert_eq!(c[0].qw[2] as u32, stag);
    assert_eq!(
        r.first_error(&write_wr(stag, reg.iova, r.buf_a.sg(0, 8))),
        Some((cqe::MAJERR_FLUSH, flush::REM_ACCESS))
    );
    // And it can be registered again.
    let (mut r2, reg2) = rig();
    assert_eq!(on_b(&mut r2, &fast_reg(stag, &reg2, ALL, 3)).error(), None);
}

/// Posts `wr` on B and checks the error CQE, the QP in ERR and the async event.
fn refused(r: &mut Rig, wr: &Wr, minor: u16) {
    let c = on_b(r, wr);
    assert_eq!(
        (c.op(), c.error()),
        (sq_op::FAST_REG, Some((cqe::MAJERR_FLUSH, minor))),
        "{c:?}"
    );
    assert_eq!(r.h.query_qp(3).attrs.state, qp_state::ERR);
    let ev = r.h.poll_eq(&mut r.aeq);
    assert!(
        ev.iter()
            .any(|e| e.code == ae::QP_LOCAL_ACCESS && e.id == 3 && e.info == u32::from(minor)),
        "{ev:?}"
    );
    assert!(r.h.guards_intact());
}

#[test]
fn fast_reg_of_a_valid_mr_fails() {
    let (mut r, reg) = rig();
    let stag = (FR_INDEX << 8) | 0x02;
    assert_eq!(on_b(&mut r, &fast_reg(stag, &reg, ALL, 3)).error(), None);
    refused(
        &mut r,
        &fast_reg((FR_INDEX << 8) | 0x03, &reg, ALL, 3),
        flush::MW_BIND,
    );
    // The MR keeps its registration under the first key.
    let e = r.h.dev();
    let mr = e.engine().mrs().slot(stag).unwrap();
    assert_eq!((mr.key, mr.valid, mr.length), (0x02, true, reg.len));
}

#[test]
fn fast_reg_of_an_mr_of_another_pd_fails() {
    let (mut r, reg) = rig();
    assert_eq!(
        alloc_mr(&mut r.h, (6 << 8) | 1, 2, 8).status,
        admin_status::OK
    );
    refused(
        &mut r,
        &fast_reg((6 << 8) | 2, &reg, ALL, 3),
        flush::MW_BIND,
    );
}

#[test]
fn fast_reg_of_a_reg_mr_mr_or_a_missing_one_fails() {
    let (mut r, reg) = rig();
    // buf_b (index 2) was made by REG_MR.
    refused(&mut r, &fast_reg(0x2ff, &reg, ALL, 3), flush::MW_BIND);
    let (mut r, reg) = rig();
    refused(&mut r, &fast_reg(0x9901, &reg, ALL, 3), flush::MW_BIND);
    let (mut r, reg) = rig();
    refused(&mut r, &fast_reg(u32::MAX, &reg, ALL, 3), flush::MW_BIND);
}

#[test]
fn fast_reg_on_a_user_qp_is_refused() {
    let (mut r, reg) = rig_with(0, 8);
    refused(
        &mut r,
        &fast_reg((FR_INDEX << 8) | 2, &reg, ALL, 3),
        flush::PROT,
    );
}

#[test]
fn a_page_list_beyond_max_pages_is_refused() {
    let (mut r, reg) = rig_with(QP_FLAG_PRIVILEGED, 2);
    refused(
        &mut r,
        &fast_reg((FR_INDEX << 8) | 2, &reg, ALL, 3),
        flush::MW_BIND,
    );
}

#[test]
fn malformed_fast_reg_fields_are_refused() {
    let stag = (FR_INDEX << 8) | 2;
    type Spoil = Box<dyn Fn(&mut Wr, &Region)>;
    let cases: Vec<(Spoil, u16)> = vec![
        // Page count too small for the length.
        (
            Box::new(|w, r| w.qw2 = qw2(r.len, 12, ALL, 2)),
            flush::LOC_QP_OP,
        ),
        // Page shift 13.
        (
            Box::new(|w, r| w.qw2 = qw2(r.len, 13, ALL, 3)),
            flush::LOC_QP_OP,
        ),
        // Length 0.
        (
            Box::new(|w, _| w.qw2 = qw2(0, 12, ALL, 3)),
            flush::LOC_QP_OP,
        ),
        // iova + length wraps.
        (Box::new(|w, _| w.qw0 = u64::MAX - 0x10), flush::LOC_QP_OP),
        // Misaligned page list address.
        (Box::new(|w, r| w.qw1 = r.list + 4), flush::LOC_QP_OP),
        // Page list outside guest memory.
        (Box::new(|w, _| w.qw1 = RAM_BASE - 8), flush::PROT),
        (Box::new(|w, _| w.qw1 = u64::MAX - 7), flush::PROT),
    ];
    for (f, minor) in cases {
        let (mut r, reg) = rig();
        let mut w = fast_reg(stag, &reg, ALL, 3);
        f(&mut w, &reg);
        refused(&mut r, &w, minor);
    }
    // A page address that is not page aligned.
    let (mut r, reg) = rig();
    r.h.write(reg.list + 8, &(reg.pages[1] + 0x10).to_le_bytes());
    refused(&mut r, &fast_reg(stag, &reg, ALL, 3), flush::LOC_QP_OP);
    // The MR stayed invalid after every refusal: a good FAST_REG on a fresh QP pair works.
    let (mut r, reg) = rig();
    assert_eq!(on_b(&mut r, &fast_reg(stag, &reg, ALL, 3)).error(), None);
}

#[test]
fn alloc_mr_validates_and_dereg_ignores_the_key() {
    let mut r = Rig::rc_flags(QP_FLAG_PRIVILEGED);
    let bad = |r: &mut Rig, stag, pd, max| {
        let c = alloc_mr(&mut r.h, stag, pd, max);
        (c.status, c.detail)
    };
    assert_eq!(bad(&mut r, 0x001, 1, 8), (admin_status::INVALID, 8));
    assert_eq!(bad(&mut r, MAX_MR << 8, 1, 8), (admin_status::BAD_ID, 8));
    assert_eq!(bad(&mut r, 0x111, 1, 8), (admin_status::EXISTS, 8));
    assert_eq!(bad(&mut r, 0x501, MAX_PD, 8), (admin_status::INVALID, 12));
    assert_eq!(bad(&mut r, 0x501, 1, 0), (admin_status::INVALID, 16));
    assert_eq!(
        bad(&mut r, 0x501, 1, MAX_FAST_REG_PAGES + 1),
        (admin_status::INVALID, 16)
    );
    assert_eq!(
        bad(&mut r, 0x501, 1, MAX_FAST_REG_PAGES),
        (admin_status::OK, 0)
    );
    // Registered under key 0x07 by FAST_REG; DEREG with the allocation's key still works.
    let reg = region(&mut r.h, 3);
    assert_eq!(on_b(&mut r, &fast_reg(0x507, &reg, ALL, 3)).error(), None);
    assert_eq!(
        r.h.admin(Host::object(admin_op::DEREG_MR, 0x501)),
        admin_status::OK
    );
    assert_eq!(
        r.h.admin(Host::object(admin_op::DEREG_MR, 0x507)),
        admin_status::NOT_FOUND
    );
    // Gone: the key is refused.
    assert_eq!(
        r.first_error(&write_wr(0x507, reg.iova, r.buf_a.sg(0, 8))),
        Some((cqe::MAJERR_FLUSH, flush::REM_ACCESS))
    );
    // The index is free again, and a REG_MR MR still needs its key to be deregistered.
    assert_eq!(bad(&mut r, 0x502, 1, 1), (admin_status::OK, 0));
    assert_eq!(
        r.h.admin(Host::object(admin_op::DEREG_MR, 0x122)),
        admin_status::NOT_FOUND
    );
}

#[test]
fn caps_report_the_fast_reg_page_limit() {
    assert_eq!(Host::new().caps().max_fast_reg_pages, MAX_FAST_REG_PAGES);
}

#[test]
fn fast_reg_fields_round_trip_for_one_and_two_levels() {
    let one = FastRegFields {
        length: MAX_MR_SIZE,
        page_shift: 30,
        access: MR_ACCESS_ALL,
        npages: PBL_ENTRIES_PER_PAGE,
        two_level: false,
        list: 0x1234_5678,
    };
    assert_eq!(fast_reg_fields(fast_reg_qw1(one), fast_reg_qw2(one)), one);
    let two = FastRegFields {
        npages: MAX_FAST_REG_PAGES,
        two_level: true,
        list: 0x8_7654_3000,
        ..one
    };
    assert_eq!(fast_reg_fields(fast_reg_qw1(two), fast_reg_qw2(two)), two);
    // 262144 = 0x40000: bits 11:0 (0) in qw2 63:52, bits 23:12 (0x40) in qw1 11:0.
    assert_eq!(fast_reg_qw1(two), 0x8_7654_3040);
    assert_eq!(fast_reg_qw2(two) >> 52, 0);
    assert_eq!(fast_reg_qw2(two) >> 41 & 1, 1);
    let q = fast_reg_qw2(FastRegFields {
        length: 0x2d00,
        page_shift: 12,
        access: MR_ACCESS_REMOTE_WRITE,
        npages: 3,
        ..Default::default()
    });
    assert_eq!(q, 0x2d00 | 12 << 42 | 2 << 48 | 3 << 52);
}

/// A two-level page list of `n` entries cycling through `distinct` scattered pages (so a
/// list of the device's maximum needs little guest memory): the root page names the list
/// pages, each of 512 entries.
struct Tree {
    pages: Vec<u64>,
    root: u64,
    leaves: Vec<u64>,
    n: u32,
}

fn tree(h: &mut Host, n: u32, distinct: u32) -> Tree {
    let pages = h.scattered_pages(distinct);
    let per = PBL_ENTRIES_PER_PAGE as usize;
    let entries: Vec<u64> = (0..n as usize).map(|i| pages[i % pages.len()]).collect();
    let leaves: Vec<u64> = entries
        .chunks(per)
        .map(|chunk| h.alloc_u64s(chunk, 4096))
        .collect();
    let root = h.alloc_u64s(&leaves, 4096);
    Tree {
        pages,
        root,
        leaves,
        n,
    }
}

impl Tree {
    /// Where byte `off` of the region (iova = the first page) lives.
    fn gpa(&self, off: u64) -> u64 {
        self.pages[((off / 4096) % self.pages.len() as u64) as usize] + off % 4096
    }
    /// A FAST_REG of all `n` pages with the two-level fields.
    fn wr(&self, stag: u32) -> Wr {
        let f = FastRegFields {
            length: u64::from(self.n) * 4096,
            page_shift: 12,
            access: ALL,
            npages: self.n,
            two_level: true,
            list: self.root,
        };
        Wr {
            opcode: sq_op::FAST_REG,
            signaled: true,
            hdr_low: stag,
            qw0: self.pages[0],
            qw1: fast_reg_qw1(f),
            qw2: fast_reg_qw2(f),
            ..Default::default()
        }
    }
}

#[test]
fn a_two_level_list_of_the_device_maximum_maps_every_list_page() {
    let mut r = Rig::rc_flags(QP_FLAG_PRIVILEGED);
    let stag = (FR_INDEX << 8) | 1;
    assert_eq!(
        alloc_mr(&mut r.h, stag, 1, MAX_FAST_REG_PAGES).status,
        admin_status::OK
    );
    // 7 distinct pages, so consecutive region pages land on different pages everywhere.
    let t = tree(&mut r.h, MAX_FAST_REG_PAGES, 7);
    assert_eq!(t.leaves.len(), 512);
    let stag = (FR_INDEX << 8) | 2;
    assert_eq!(on_b(&mut r, &t.wr(stag)).error(), None);
    let mr = r.h.dev().engine().mrs().slot(stag).unwrap().clone();
    assert_eq!(
        (mr.pages.len(), mr.valid),
        (MAX_FAST_REG_PAGES as usize, true)
    );
    // WRITEs across the first, a middle and the last list page boundaries, and into the
    // region's last bytes; each lands in the pages the list names.
    let len = u64::from(t.n) * 4096;
    for (k, off) in [
        0x800u64,
        512 * 4096 - 0x400,
        131_072 * 4096 - 0x10,
        len - 0x1000,
    ]
    .into_iter()
    .enumerate()
    {
        let data = pattern(0x1000, k as u8 + 1);
        r.h.buf_write(&r.buf_a, 0, &data);
        r.h.send(
            &mut r.a,
            &write_wr(stag, t.pages[0] + off, r.buf_a.sg(0, 0x1000)),
        );
        let c = r.h.poll_cq(&mut r.cq_a);
        assert_eq!(
            (c[0].op(), c[0].error()),
            (sq_op::RDMA_WRITE, None),
            "{off:#x}"
        );
        let got: Vec<u8> = (0..0x1000u64)
            .map(|i| r.h.read(t.gpa(off + i), 1)[0])
            .collect();
        assert_eq!(got, data, "WRITE at region offset {off:#x}");
    }
    // One byte past the end is refused.
    assert_eq!(
        r.first_error(&write_wr(stag, t.pages[0] + len, r.buf_a.sg(0, 1))),
        Some((cqe::MAJERR_FLUSH, flush::REM_ACCESS))
    );
    assert!(r.h.guards_intact());
}

#[test]
fn malformed_two_level_lists_are_refused() {
    let stag = (FR_INDEX << 8) | 2;
    let cases: Vec<(Box<dyn Fn(&mut Host, &Tree, &mut Wr)>, u16)> = vec![
        // The root outside guest memory.
        (
            Box::new(|_, _, w| w.qw1 = (RAM_BASE - 4096) | (w.qw1 & 0xfff)),
            flush::PROT,
        ),
        // A list page address that is not 8-byte aligned.
        (
            Box::new(|h, t, _| h.write(t.root + 8, &(t.leaves[1] + 4).to_le_bytes())),
            flush::LOC_QP_OP,
        ),
        // A list page (of 88 entries) that runs past its 4 KiB page.
        (
            Box::new(|h, t, _| h.write(t.root + 8, &(t.leaves[1] + 4000).to_le_bytes())),
            flush::LOC_QP_OP,
        ),
        // A list page outside guest memory.
        (
            Box::new(|h, t, _| h.write(t.root, &(RAM_BASE - 4096).to_le_bytes())),
            flush::PROT,
        ),
        // A page address in the second list page that is not page aligned.
        (
            Box::new(|h, t, _| h.write(t.leaves[1] + 16, &(t.pages[0] + 0x10).to_le_bytes())),
            flush::LOC_QP_OP,
        ),
        // More pages than the MR's maximum (qw1 carries the count's high bits).
        (Box::new(|_, _, w| w.qw1 |= 1), flush::MW_BIND),
        // The same 600 pages as a one-level list: one level holds 512.
        (
            Box::new(|_, t, w| {
                w.qw1 = t.leaves[0];
                w.qw2 &= !(1 << fast_reg::TWO_LEVEL);
            }),
            flush::LOC_QP_OP,
        ),
    ];
    for (spoil, minor) in cases {
        let mut r = Rig::rc_flags(QP_FLAG_PRIVILEGED);
        assert_eq!(
            alloc_mr(&mut r.h, (FR_INDEX << 8) | 1, 1, 600).status,
            admin_status::OK
        );
        let t = tree(&mut r.h, 600, 3);
        let mut w = t.wr(stag);
        spoil(&mut r.h, &t, &mut w);
        refused(&mut r, &w, minor);
        let mr = r.h.dev().engine().mrs().slot(stag).unwrap().clone();
        assert!(!mr.valid && mr.pages.is_empty());
    }
}
