//! Two NICs on one wire: each a test host with its own guest RAM, joined by a pump that
//! carries the frames each engine emits to the other through optional `fault::Link`s, on a
//! hand-driven device clock. Nothing sleeps: when no frame is in flight the clock jumps to
//! the next timer, so retransmission and RNR back-off cost no wall time and every run with
//! the same seed is the same run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::*;
use crate::device::Clock;
use crate::fabric::fault::{FaultConfig, Link};
use crate::fabric::pcap::PcapWriter;
use crate::rdma::transport::MAX_OUTBOX;
use crate::wire::RxFrame;

pub(super) const QPN: u32 = 2;
const UDQPN: u32 = 3;
const QKEY: u32 = 0x1111_2222;
const ACC: u32 = MR_ACCESS_LOCAL_WRITE | MR_ACCESS_REMOTE_READ | MR_ACCESS_REMOTE_WRITE;

pub(super) fn mac(i: u8) -> [u8; 6] {
    [2, 0, 0, 0, 0x10, i]
}

pub(super) fn gid(i: u8) -> [u8; 16] {
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, i]
}

/// An IPv6 GID (fd00::i).
fn gid6(i: u8) -> [u8; 16] {
    [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, i]
}

/// Transport parameters of a connection.
#[derive(Clone, Copy)]
pub(super) struct Path {
    pub(super) mtu: u8,
    pub(super) timeout: u8,
    pub(super) retry_cnt: u8,
    pub(super) rnr_retry: u8,
    pub(super) min_rnr_timer: u8,
}

impl Default for Path {
    fn default() -> Self {
        Path {
            mtu: 3,
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
        }
    }
}

/// A registered, physically contiguous buffer.
#[derive(Clone, Copy)]
pub(super) struct Mem {
    pub(super) gpa: u64,
    pub(super) va: u64,
    pub(super) len: u64,
    pub(super) stag: u32,
}

impl Mem {
    /// A signaled RDMA WRITE of the first `len` bytes of `src` to the start of this buffer.
    pub(super) fn write_from(&self, src: &Mem, len: u32) -> Wr {
        Wr {
            opcode: sq_op::RDMA_WRITE,
            signaled: true,
            sges: vec![src.sg(0, len)],
            hdr_low: self.stag,
            qw2: self.va,
            ..Default::default()
        }
    }

    pub(super) fn sg(&self, off: u64, len: u32) -> Sg {
        Sg {
            addr: self.va + off,
            len,
            lkey: self.stag,
        }
    }
}

pub(super) struct Nic {
    pub(super) h: Host,
    pub(super) aeq: EqH,
    pub(super) scq: CqH,
    pub(super) rcq: CqH,
    pub(super) qp: QpH,
    pub(super) ud: QpH,
    pub(super) src: Mem,
    pub(super) dst: Mem,
    /// IPv6 GIDs and a VLAN-tagged path instead of IPv4.
    pub(super) v6: bool,
}

impl Nic {
    fn new(i: u8, clock: &Arc<AtomicU64>, buf: u64) -> Self {
        Self::with_clock(i, Clock::Manual(Arc::clone(clock)), buf)
    }

    fn with_clock(i: u8, clock: Clock, buf: u64) -> Self {
        Self::build(i, clock, buf, false)
    }

    pub(super) fn build(i: u8, clock: Clock, buf: u64, v6: bool) -> Self {
        let mut h = Host::with_ram(2 * buf.next_multiple_of(2 << 20) + (16 << 20));
        h.dev().set_clock(clock);
        let mut aeq = h.create_eq(0, EQ_KIND_AEQ, 0, 256);
        let ceq = h.create_eq(1, EQ_KIND_CEQ, 1, 256);
        h.arm_eq(&aeq);
        h.arm_eq(&ceq);
        let port = SetPort {
            hdr: Host::hdr(admin_op::SET_PORT),
            mac: mac(i),
            link: LINK_UP,
            mtu: 5,
            ..Default::default()
        };
        assert_eq!(h.admin(port.encode()), admin_status::OK);
        let g = GidCmd {
            hdr: Host::hdr(admin_op::ADD_GID),
            index: 0,
            gid: if v6 { gid6(i) } else { gid(i) },
            mac: mac(i),
            ..Default::default()
        };
        assert_eq!(h.admin(g.encode()), admin_status::OK);
        h.poll_eq(&mut aeq);
        h.arm_eq(&aeq);
        let scq = h.create_cq(1, 256, 1);
        let rcq = h.create_cq(2, 256, 1);
        let qp = h.create_qp(QPN, QP_TYPE_RC, 1, 1, 2, 1024, 128, 2);
        let ud = h.create_qp(UDQPN, QP_TYPE_UD, 1, 1, 2, 256, 64, 2);
        h.ud_to_rts(UDQPN, QKEY);
        let src = reg_contig(&mut h, 0x100 | 0x11, buf);
        let dst = reg_contig(&mut h, 0x200 | 0x22, buf);
        Nic {
            h,
            aeq,
            scq,
            rcq,
            qp,
            ud,
            src,
            dst,
            v6,
        }
    }

    /// RESET -> INIT -> RTR -> RTS towards NIC `peer`.
    fn connect(&mut self, peer: u8, p: Path, sq_psn: u32, rq_psn: u32) {
        self.connect_qp(QPN, QPN, peer, p, sq_psn, rq_psn);
    }

    /// RESET -> INIT -> RTR -> RTS of QP `qpn` towards QP `dest` of NIC `peer`.
    pub(super) fn connect_qp(
        &mut self,
        qpn: u32,
        dest: u32,
        peer: u8,
        p: Path,
        sq_psn: u32,
        rq_psn: u32,
    ) {
        let attrs = |state| QpAttrs {
            state,
            access: QP_ACCESS_REMOTE_READ | QP_ACCESS_REMOTE_WRITE,
            dest_qpn: dest,
            dgid: if self.v6 { gid6(peer) } else { gid(peer) },
            dmac: mac(peer),
            av_flags: if self.v6 { AV_FLAG_VLAN } else { AV_FLAG_IPV4 },
            vlan_id: 5,
            flow_label: 0x12345,
            traffic_class: 0x60,
            hop_limit: 64,
            udp_sport: 0xc000 + u16::from(peer),
            path_mtu: p.mtu,
            timeout: p.timeout,
            retry_cnt: p.retry_cnt,
            rnr_retry: p.rnr_retry,
            min_rnr_timer: p.min_rnr_timer,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 16,
            sq_psn,
            rq_psn,
            ..Default::default()
        };
        let h = &mut self.h;
        assert_eq!(
            h.modify(qpn, qp_attr::STATE | qp_attr::ACCESS, attrs(qp_state::INIT)),
            0
        );
        let rtr = qp_attr::STATE
            | qp_attr::AV
            | qp_attr::DEST_QPN
            | qp_attr::PATH_MTU
            | qp_attr::RQ_PSN
            | qp_attr::MIN_RNR_TIMER
            | qp_attr::MAX_DEST_RD_ATOMIC;
        assert_eq!(h.modify(qpn, rtr, attrs(qp_state::RTR)), 0);
        let rts = qp_attr::STATE
            | qp_attr::TIMEOUT
            | qp_attr::RETRY_CNT
            | qp_attr::RNR_RETRY
            | qp_attr::SQ_PSN
            | qp_attr::MAX_RD_ATOMIC;
        assert_eq!(h.modify(qpn, rts, attrs(qp_state::RTS)), 0);
    }
}

/// A buffer of `len` bytes in 2 MiB pages (4 KiB pages when small), registered for
/// everything.
fn reg_contig(h: &mut Host, stag: u32, len: u64) -> Mem {
    let shift = if len <= 1 << 20 { 12 } else { 21 };
    let ps = 1u64 << shift;
    let gpa = h.alloc(len.next_multiple_of(ps), ps);
    let pages: Vec<u64> = (0..len.div_ceil(ps)).map(|k| gpa + k * ps).collect();
    let list = h.page_list(&pages);
    let va = VA_OFFSET + gpa;
    let st = h.admin(
        RegMr {
            hdr: Host::hdr(admin_op::REG_MR),
            stag,
            pd: 1,
            access: ACC,
            page_shift: shift,
            iova: va,
            length: len,
            pages: list,
            ..Default::default()
        }
        .encode(),
    );
    assert_eq!(st, admin_status::OK, "REG_MR");
    Mem { gpa, va, len, stag }
}

/// Decides whether a frame is lost.
type FrameFilter = Box<dyn FnMut(&[u8]) -> bool>;

/// The two NICs and the wire between them.
struct Net {
    a: Nic,
    b: Nic,
    clock: Arc<AtomicU64>,
    /// Faults on the way to A and to B.
    to_a: Option<Link>,
    to_b: Option<Link>,
    /// Frames towards B are dropped (B is gone).
    b_gone: bool,
    pcap: Option<PcapWriter<Vec<u8>>>,
    frames: u64,
    /// Frames towards A for which this returns true are lost.
    drop_to_a: Option<FrameFilter>,
}

impl Net {
    fn new(buf: u64, p: Path) -> Self {
        Self::build(buf, p, false)
    }

    fn build(buf: u64, p: Path, v6: bool) -> Self {
        let clock = Arc::new(AtomicU64::new(1_000_000));
        let mut a = Nic::build(1, Clock::Manual(Arc::clone(&clock)), buf, v6);
        let mut b = Nic::build(2, Clock::Manual(Arc::clone(&clock)), buf, v6);
        // PSNs near the 24-bit wrap on one side, so wrapping is exercised.
        a.connect(2, p, 0xff_fff0, 0x1000);
        b.connect(1, p, 0x1000, 0xff_fff0);
        Net {
            a,
            b,
            clock,
            to_a: None,
            to_b: None,
            b_gone: false,
            pcap: None,
            frames: 0,
            drop_to_a: None,
        }
    }

    /// Creates AH `ah_id` in PD 1 of A: IPv4 to B.
    fn ah_to_b(&mut self, ah_id: u32) {
        let ah = CreateAh {
            hdr: Host::hdr(admin_op::CREATE_AH),
            ah_id,
            pd: 1,
            attrs: QpAttrs {
                dgid: gid(2),
                dmac: mac(2),
                av_flags: AV_FLAG_IPV4,
                hop_limit: 64,
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(self.a.h.admin(ah.encode()), admin_status::OK);
    }

    fn faults(&mut self, cfg: FaultConfig, seed: u64) {
        self.to_a = Some(Link::new(cfg, seed).unwrap());
        self.to_b = Some(Link::new(cfg, seed ^ 0x5555).unwrap());
    }

    fn now(&self) -> u64 {
        self.clock.load(Ordering::Relaxed)
    }

    fn carry(&mut self, frames: Vec<Vec<u8>>, to_b: bool) -> usize {
        let now = self.now();
        let now_ms = now / 1000;
        let mut out = Vec::new();
        // As the fabric's switch: an engine's frame is sealed (its ICRC written) unless it
        // goes straight to the other engine, seen by nothing on the way.
        let seen = self.pcap.is_some()
            || (!to_b && self.drop_to_a.is_some())
            || if to_b { &self.to_b } else { &self.to_a }.is_some();
        for mut f in frames {
            if seen {
                crate::wire::seal(&mut f).unwrap();
            }
            self.frames += 1;
            if let Some(w) = self.pcap.as_mut() {
                w.write_at(&f, (now / 1_000_000) as u32, (now % 1_000_000) as u32)
                    .unwrap();
            }
            if !to_b && self.drop_to_a.as_mut().is_some_and(|d| d(&f)) {
                continue;
            }
            let link = if to_b { &mut self.to_b } else { &mut self.to_a };
            match link {
                Some(l) => l.send(f, now_ms, &mut out),
                None => out.push(f),
            }
        }
        let n = out.len();
        // As the fabric's switch: an engine's frames that crossed no link model arrive
        // vouched for (`wire/rx_frame.rs`), the rest are checked.
        let built_here = if to_b { &self.to_b } else { &self.to_a }.is_none();
        self.deliver(out, to_b, built_here);
        n
    }

    /// Hands `frames` to B (or A) as one batch, as the engine thread takes them from its
    /// queue (so the responder coalesces ACKs within it).
    fn deliver(&mut self, frames: Vec<Vec<u8>>, to_b: bool, built_here: bool) {
        if frames.is_empty() || (to_b && self.b_gone) {
            return;
        }
        let frames: Vec<RxFrame> = if built_here {
            frames.into_iter().map(RxFrame::built_here).collect()
        } else {
            frames.into_iter().map(RxFrame::from_wire).collect()
        };
        let nic = if to_b { &mut self.b } else { &mut self.a };
        nic.h.dev().rx_queued(&frames);
        // As the engine thread does: the next frames built reuse (poisoned) buffers.
        crate::wire::frame_pool::recycle(frames.into_iter().map(RxFrame::into_bytes));
    }

    /// Runs the wire until `done` (checked whenever nothing is in flight) or until nothing
    /// is left to do; returns whether `done` was reached.
    fn run(&mut self, mut done: impl FnMut(&mut Net) -> bool) -> bool {
        for _ in 0..50_000_000u64 {
            let fa = self.a.h.dev().take_tx_unsealed();
            let fb = self.b.h.dev().take_tx_unsealed();
            assert!(fa.len() <= MAX_OUTBOX && fb.len() <= MAX_OUTBOX);
            if !fa.is_empty() || !fb.is_empty() {
                self.carry(fa, true);
                self.carry(fb, false);
                continue;
            }
            if done(self) {
                return true;
            }
            let now = self.now();
            let due = [
                self.a.h.dev().next_deadline(),
                self.b.h.dev().next_deadline(),
                self.to_a
                    .as_ref()
                    .and_then(Link::next_due)
                    .map(|t| t * 1000),
                self.to_b
                    .as_ref()
                    .and_then(Link::next_due)
                    .map(|t| t * 1000),
            ];
            let Some(next) = due.into_iter().flatten().min() else {
                return false;
            };
            // Never stand still: a timer "due now" that produces nothing must not loop.
            let next = next.max(now + 1);
            self.clock.store(next, Ordering::Relaxed);
            let ms = next / 1000;
            for to_b in [true, false] {
                let mut out = Vec::new();
                let link = if to_b { &mut self.to_b } else { &mut self.to_a };
                if let Some(l) = link {
                    l.poll(ms, &mut out);
                }
                // Delayed by the link model.
                self.deliver(out, to_b, false);
            }
            self.a.h.dev().tick();
            self.b.h.dev().tick();
        }
        false
    }

    /// Runs the wire until A's send CQ holds a completion and, if `recv`, B's receive CQ too
    /// (B's receive CQ is polled only then); returns what A's send CQ and B's receive CQ gave.
    fn complete(&mut self, recv: bool) -> (Vec<Cqe>, Vec<Cqe>) {
        let (mut sc, mut rc) = (Vec::new(), Vec::new());
        assert!(self.run(|n| {
            sc.extend(n.a.h.poll_cq(&mut n.a.scq));
            if recv {
                rc.extend(n.b.h.poll_cq(&mut n.b.rcq));
            }
            !sc.is_empty() && (!recv || !rc.is_empty())
        }));
        (sc, rc)
    }
}

/// Operations the tests run.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
}

const ALL_OPS: [Op; 5] = [Op::Send, Op::SendImm, Op::Write, Op::WriteImm, Op::Read];

/// Runs one `op` of `len` bytes from A to B (READ: A reads B's memory) and checks the data
/// and both sides' completions.
fn transfer(net: &mut Net, op: Op, len: u64, seed: u8) {
    let (data, got) = transfer_data(net, op, len, seed);
    assert!(got == data, "{op:?} of {len} bytes: data differs");
}

/// [`transfer`] with the completions checked; returns the data sent and the data placed.
fn transfer_data(net: &mut Net, op: Op, len: u64, seed: u8) -> (Vec<u8>, Vec<u8>) {
    let l32 = len as u32;
    // Data: for READ it starts in B's src, else in A's src; it lands in the other's dst.
    let data = pattern(len as usize, seed);
    let (from, to) = if op == Op::Read {
        (&net.b, &net.a)
    } else {
        (&net.a, &net.b)
    };
    from.h.write(from.src.gpa, &data);
    to.h.write(to.dst.gpa, &vec![0u8; len as usize]);
    let imm = 0x1234_5600 | u32::from(seed);
    if matches!(op, Op::Send | Op::SendImm | Op::WriteImm) {
        let sg = net.b.dst.sg(0, l32);
        net.b.h.post_recv(&mut net.b.qp, &[sg]);
    }
    let mut wr = Wr {
        signaled: true,
        ..Default::default()
    };
    match op {
        Op::Send | Op::SendImm => {
            wr.opcode = sq_op::SEND;
            wr.sges = vec![net.a.src.sg(0, l32)];
            wr.imm = (op == Op::SendImm).then_some(imm);
        }
        Op::Write | Op::WriteImm => {
            wr.opcode = sq_op::RDMA_WRITE;
            wr.sges = vec![net.a.src.sg(0, l32)];
            wr.imm = (op == Op::WriteImm).then_some(imm);
            wr.hdr_low = net.b.dst.stag;
            wr.qw2 = net.b.dst.va;
        }
        Op::Read => {
            wr.opcode = sq_op::RDMA_READ;
            wr.sges = vec![net.a.dst.sg(0, l32)];
            wr.hdr_low = net.b.src.stag;
            wr.qw2 = net.b.src.va;
        }
    }
    net.a.h.send(&mut net.a.qp, &wr);
    let want_recv = matches!(op, Op::Send | Op::SendImm | Op::WriteImm);
    let mut sc = Vec::new();
    let mut rc = Vec::new();
    let ok = net.run(|n| {
        sc.extend(n.a.h.poll_cq(&mut n.a.scq));
        rc.extend(n.b.h.poll_cq(&mut n.b.rcq));
        !sc.is_empty() && (!want_recv || !rc.is_empty())
    });
    assert!(ok, "{op:?} of {len} bytes did not complete: {sc:?} {rc:?}");
    assert_eq!(sc.len(), 1, "{op:?} {len}: {sc:?}");
    assert_eq!(sc[0].error(), None, "{op:?} {len}");
    assert_eq!(sc[0].len(), l32);
    if want_recv {
        assert_eq!(rc.len(), 1, "{op:?} {len}: {rc:?}");
        let c = rc[0];
        assert_eq!(c.error(), None, "{op:?} {len}");
        assert_eq!(c.len(), l32);
        let want_imm = matches!(op, Op::SendImm | Op::WriteImm).then_some(imm);
        assert_eq!(c.imm(), want_imm);
        let want_op = if op == Op::WriteImm {
            cqe::OP_RECV_RDMA_IMM
        } else {
            cqe::OP_RECV
        };
        assert_eq!(c.op(), want_op);
    } else {
        assert!(rc.is_empty(), "{op:?}: {rc:?}");
    }
    let (to_nic, dst) = if op == Op::Read {
        (&net.a, net.a.dst)
    } else {
        (&net.b, net.b.dst)
    };
    let got = to_nic.h.read(dst.gpa, len as usize);
    (data, got)
}

#[test]
fn two_nics_run_every_operation_at_every_mtu() {
    let sizes: [u64; 9] = [1, 3, 255, 256, 257, 4096, 4097, 65_537, (1 << 20) + 5];
    for (mtu, extra) in [(1u8, 0u64), (2, 0), (3, 0), (4, 0), (5, 3 << 20)] {
        let p = Path {
            mtu,
            ..Path::default()
        };
        let mut net = Net::new(3 << 20, p);
        let mut seed = mtu;
        for &len in sizes.iter().chain((extra > 0).then_some(&extra)) {
            for op in ALL_OPS {
                seed = seed.wrapping_add(7);
                transfer(&mut net, op, len, seed);
            }
        }
        assert!(net.a.h.guards_intact() && net.b.h.guards_intact());
        // A's PSNs went past the 24-bit wrap.
        let a = net.a.h.query_qp(QPN);
        assert!(a.attrs.sq_psn < 0xff_fff0, "sq_psn {:#x}", a.attrs.sq_psn);
    }
}

fn lossy() -> FaultConfig {
    FaultConfig::parse("drop=0.01,dup=0.01,reorder=0.01,delay=0.01,delay-ms=2").unwrap()
}

#[test]
fn lossy_wire_still_delivers_every_operation() {
    let p = Path {
        mtu: 3,
        ..Path::default()
    };
    let mut net = Net::new(2 << 20, p);
    net.faults(lossy(), 7);
    net.pcap = Some(PcapWriter::new(Vec::new()).unwrap());
    let mut seed = 1u8;
    for len in [1u64, 1000, 1024, 50_000, 2 << 20] {
        for op in ALL_OPS {
            seed = seed.wrapping_add(13);
            transfer(&mut net, op, len, seed);
        }
    }
    let c = net.to_b.as_ref().unwrap().counters();
    assert!(
        c.dropped > 0 && c.duplicated > 0 && c.reordered > 0,
        "{c:?}"
    );
    // Every frame of the capture is a well-formed RoCEv2 packet with a good ICRC.
    let cap = net.pcap.take().unwrap().into_inner();
    let frames = pcap_frames(&cap);
    assert_eq!(frames.len() as u64, net.frames);
    for f in &frames {
        crate::wire::parse(f).unwrap();
    }
    tshark_check(&cap, frames.len());
}

/// The frames of a classic pcap file.
fn pcap_frames(cap: &[u8]) -> Vec<Vec<u8>> {
    assert_eq!(&cap[..4], &0xa1b2_c3d4u32.to_le_bytes());
    let mut out = Vec::new();
    let mut at = 24;
    while at < cap.len() {
        let incl = u32::from_le_bytes(cap[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push(cap[at + 16..at + 16 + incl].to_vec());
        at += 16 + incl;
    }
    out
}

/// If tshark is installed, it must dissect every frame as RoCE (with its ICRC field) without
/// a malformed packet or an expert warning/error. tshark does not verify the ICRC; the
/// wire parser the caller ran does.
fn tshark_check(cap: &[u8], n: usize) {
    let Ok(out) = std::process::Command::new("tshark")
        .arg("--version")
        .output()
    else {
        eprintln!("tshark not found: pcap checked by the wire parser only");
        return;
    };
    if !out.status.success() {
        return;
    }
    // Tests run in parallel: one file per call.
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "ferrdma-wire-{}-{}.pcap",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, cap).unwrap();
    let run = |args: &[&str]| {
        // The RPC-over-RDMA heuristic dissector tries every SEND payload as an RPC header
        // and calls our pattern bytes malformed; it is not about the RoCE packet.
        let o = std::process::Command::new("tshark")
            .args(["-n", "--disable-protocol", "rpcordma"])
            .arg("-r")
            .arg(&path)
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "tshark: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let roce = run(&[
        "-Y",
        "infiniband.invariant.crc",
        "-T",
        "fields",
        "-e",
        "frame.number",
    ]);
    assert_eq!(
        roce.lines().count(),
        n,
        "frames tshark dissects as InfiniBand"
    );
    let bad = run(&["-Y", "_ws.malformed || _ws.expert.severity >= warning"]);
    let _ = std::fs::remove_file(&path);
    assert!(bad.trim().is_empty(), "tshark found problems:\n{bad}");
}

/// The acceptance transfer: 64 MiB WRITE, READ and SEND with immediate under 1% loss,
/// duplication, reordering and delay, data verified byte for byte. About 12 s in a debug
/// build (the wire clock is virtual, so timeouts cost nothing).
#[test]
fn wire_64mib_under_loss() {
    let len = 64u64 << 20;
    let p = Path {
        mtu: 5,
        ..Path::default()
    };
    let mut net = Net::new(len, p);
    net.faults(lossy(), 64);
    let t0 = std::time::Instant::now();
    transfer(&mut net, Op::Write, len, 1);
    transfer(&mut net, Op::Read, len, 2);
    transfer(&mut net, Op::SendImm, len, 3);
    let c = net.to_b.as_ref().unwrap().counters();
    eprintln!(
        "64 MiB WRITE + READ + SEND: {} frames, {:?} towards B, {:?} wall, {} us device time",
        net.frames,
        c,
        t0.elapsed(),
        net.now()
    );
    assert!(c.dropped > 100, "{c:?}");
}

fn aeq_codes(n: &mut Nic) -> Vec<u16> {
    let v = n.h.poll_eq(&mut n.aeq).iter().map(|e| e.code).collect();
    n.h.arm_eq(&n.aeq);
    v
}

#[test]
fn peer_gone_exhausts_retries() {
    let p = Path {
        timeout: 14,
        retry_cnt: 2,
        ..Path::default()
    };
    let mut net = Net::new(1 << 20, p);
    net.b_gone = true;
    let t0 = net.now();
    let wr = Wr {
        opcode: sq_op::RDMA_WRITE,
        signaled: true,
        sges: vec![net.a.src.sg(0, 5000)],
        hdr_low: net.b.dst.stag,
        qw2: net.b.dst.va,
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &wr);
    let (sc, _) = net.complete(false);
    assert_eq!(sc[0].error(), Some((cqe::MAJERR_FLUSH, flush::RETRY_EXC)));
    // Three timeouts of 4.096 us * 2^14 each: the first send plus two retries.
    let waited = net.now() - t0;
    assert!((3 * 67_108..4 * 67_108).contains(&waited), "{waited} us");
    assert!(aeq_codes(&mut net.a).contains(&ae::QP_RETRY_EXCEEDED));
    assert_eq!(net.a.h.query_qp(QPN).attrs.state, qp_state::ERR);
}

#[test]
fn peer_link_down_exhausts_retries_and_link_up_restores_delivery() {
    let p = Path {
        timeout: 14,
        retry_cnt: 2,
        ..Path::default()
    };
    let mut net = Net::new(1 << 20, p);
    let set_link = |n: &mut Nic, up: bool| {
        let port = SetPort {
            hdr: Host::hdr(admin_op::SET_PORT),
            mac: mac(2),
            link: if up { LINK_UP } else { LINK_DOWN },
            mtu: 5,
            ..Default::default()
        };
        assert_eq!(n.h.admin(port.encode()), admin_status::OK);
    };
    // B's port goes down: it neither answers nor accepts A's requests.
    set_link(&mut net.b, false);
    let wr = Wr {
        opcode: sq_op::RDMA_WRITE,
        signaled: true,
        sges: vec![net.a.src.sg(0, 5000)],
        hdr_low: net.b.dst.stag,
        qw2: net.b.dst.va,
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &wr);
    let (sc, _) = net.complete(false);
    assert_eq!(sc[0].error(), Some((cqe::MAJERR_FLUSH, flush::RETRY_EXC)));
    assert!(aeq_codes(&mut net.a).contains(&ae::QP_RETRY_EXCEEDED));
    assert!(aeq_codes(&mut net.b).contains(&ae::PORT_DOWN));
    assert!(net.b.h.stats().rx_drops > 0);
    // Back up, a fresh connection delivers again.
    set_link(&mut net.b, true);
    assert!(aeq_codes(&mut net.b).contains(&ae::PORT_ACTIVE));
    reconnect(&mut net, 0x100);
    transfer(&mut net, Op::Write, 3000, 7);
}

#[test]
fn no_receive_exhausts_rnr_retries() {
    let p = Path {
        rnr_retry: 2,
        min_rnr_timer: 14,
        ..Path::default()
    };
    let mut net = Net::new(1 << 20, p);
    let wr = Wr {
        opcode: sq_op::SEND,
        signaled: true,
        sges: vec![net.a.src.sg(0, 3000)],
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &wr);
    let (sc, _) = net.complete(false);
    assert_eq!(
        sc[0].error(),
        Some((cqe::MAJERR_FLUSH, flush::RNR_RETRY_EXC))
    );
    assert!(aeq_codes(&mut net.a).contains(&ae::QP_RNR_RETRY_EXCEEDED));
    assert_eq!(net.b.h.stats().rnr_naks, 3);
    // B is fine and still connected.
    assert_eq!(net.b.h.query_qp(QPN).attrs.state, qp_state::RTS);
}

#[test]
fn rnr_then_receive_posted_completes() {
    let p = Path {
        rnr_retry: 7,
        min_rnr_timer: 10,
        ..Path::default()
    };
    let mut net = Net::new(1 << 20, p);
    let data = pattern(3000, 9);
    net.a.h.write(net.a.src.gpa, &data);
    let wr = Wr {
        opcode: sq_op::SEND,
        signaled: true,
        sges: vec![net.a.src.sg(0, 3000)],
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &wr);
    let mut n = 0;
    assert!(net.run(|_| {
        n += 1;
        n > 20
    }));
    assert!(net.b.h.stats().rnr_naks >= 2);
    let sg = net.b.dst.sg(0, 4000);
    net.b.h.post_recv(&mut net.b.qp, &[sg]);
    let (sc, rc) = net.complete(true);
    assert_eq!(sc[0].error(), None);
    assert_eq!(rc[0].len(), 3000);
    assert_eq!(net.b.h.read(net.b.dst.gpa, 3000), data);
}

#[test]
fn remote_access_error_hits_both_sides() {
    let mut net = Net::new(1 << 20, Path::default());
    let wr = Wr {
        opcode: sq_op::RDMA_WRITE,
        signaled: true,
        sges: vec![net.a.src.sg(0, 100)],
        hdr_low: net.b.dst.stag ^ 0x01,
        qw2: net.b.dst.va,
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &wr);
    let (sc, _) = net.complete(false);
    assert_eq!(sc[0].error(), Some((cqe::MAJERR_FLUSH, flush::REM_ACCESS)));
    assert!(aeq_codes(&mut net.a).contains(&ae::QP_REMOTE_ERROR));
    assert!(aeq_codes(&mut net.b).contains(&ae::QP_REMOTE_ACCESS));
    assert_eq!(net.a.h.query_qp(QPN).attrs.state, qp_state::ERR);
    assert_eq!(net.b.h.query_qp(QPN).attrs.state, qp_state::ERR);
}

#[test]
fn receive_too_small_is_an_invalid_request() {
    let mut net = Net::new(1 << 20, Path::default());
    let sg = net.b.dst.sg(0, 1000);
    net.b.h.post_recv(&mut net.b.qp, &[sg]);
    let wr = Wr {
        opcode: sq_op::SEND,
        signaled: true,
        sges: vec![net.a.src.sg(0, 5000)],
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &wr);
    let (sc, rc) = net.complete(true);
    assert_eq!(sc[0].error(), Some((cqe::MAJERR_FLUSH, flush::REM_INV_REQ)));
    assert_eq!(rc[0].error(), Some((cqe::MAJERR_FLUSH, flush::LOC_LEN)));
    assert!(aeq_codes(&mut net.b).contains(&ae::QP_INVALID_REQUEST));
}

#[test]
fn send_with_invalidate_over_the_wire() {
    let mut net = Net::new(1 << 20, Path::default());
    let sg = net.b.dst.sg(0, 64);
    net.b.h.post_recv(&mut net.b.qp, &[sg]);
    let target = net.b.src.stag;
    let wr = Wr {
        opcode: sq_op::SEND_INV,
        signaled: true,
        sges: vec![net.a.src.sg(0, 64)],
        hdr_low: target,
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &wr);
    let (sc, rc) = net.complete(true);
    assert_eq!(sc[0].error(), None);
    assert_eq!(rc[0].error(), None);
    assert_eq!(rc[0].qw[2] as u32, target, "invalidated STag reported");
    // The invalidated MR refuses a READ now.
    let wr = Wr {
        opcode: sq_op::RDMA_READ,
        signaled: true,
        sges: vec![net.a.dst.sg(0, 8)],
        hdr_low: target,
        qw2: net.b.src.va,
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &wr);
    let (sc, _) = net.complete(false);
    assert_eq!(sc[0].error(), Some((cqe::MAJERR_FLUSH, flush::REM_ACCESS)));
}

#[test]
fn fast_registered_rkey_over_the_wire_then_send_with_invalidate() {
    let mut net = Net::new(1 << 20, Path::default());
    // B: a privileged (kernel) QP registers 3 pages of its dst buffer, in reverse order, at a
    // made-up iova, under a fast-registration MR (index 7, PD 1).
    let mut kqp = net
        .b
        .h
        .create_qp_flags(QP_FLAG_PRIVILEGED, 4, QP_TYPE_RC, 1, 1, 2, 64, 16, 0);
    net.b.connect_qp(4, 4, 1, Path::default(), 0, 0);
    let alloc = AllocMr {
        hdr: Host::hdr(admin_op::ALLOC_MR),
        stag: 0x701,
        pd: 1,
        max_pages: 4,
        ..Default::default()
    };
    assert_eq!(net.b.h.admin(alloc.encode()), admin_status::OK);
    let d = net.b.dst.gpa;
    let pages = [d + 0x2000, d + 0x1000, d];
    let list = net.b.h.alloc_u64s(&pages, 8);
    let iova = 0x5555_0000_0400;
    let stag = 0x7ab;
    let fr = Wr {
        opcode: sq_op::FAST_REG,
        signaled: true,
        hdr_low: stag,
        qw0: iova,
        qw1: list,
        qw2: fast_reg_qw2(FastRegFields {
            length: 0x2800,
            page_shift: 12,
            access: ACC,
            npages: 3,
            ..Default::default()
        }),
        ..Default::default()
    };
    net.b.h.send(&mut kqp, &fr);
    let c = net.b.h.poll_cq(&mut net.b.scq);
    assert_eq!(
        (c.len(), c[0].op(), c[0].error()),
        (1, sq_op::FAST_REG, None)
    );
    // A writes 0x2000 bytes at iova + 0x200 over the wire: they land across the 3 pages.
    let data = pattern(0x2000, 3);
    net.a.h.write(net.a.src.gpa, &data);
    net.b.h.write(d, &[0u8; 0x3000]);
    let wr = Wr {
        opcode: sq_op::RDMA_WRITE,
        signaled: true,
        sges: vec![net.a.src.sg(0, 0x2000)],
        hdr_low: stag,
        qw2: iova + 0x200,
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &wr);
    let (sc, _) = net.complete(false);
    assert_eq!(sc[0].error(), None);
    // iova offset 0x400 + 0x200 = 0x600 into page 0 (d + 0x2000), and so on.
    let mut got = net.b.h.read(d + 0x2600, 0xa00);
    got.extend(net.b.h.read(d + 0x1000, 0x1000));
    got.extend(net.b.h.read(d, 0x600));
    assert!(got == data, "data through the fast-registered rkey differs");
    // SEND with invalidate of the rkey, then a READ through it is refused.
    let sg = net.b.dst.sg(0x10000, 64);
    net.b.h.post_recv(&mut net.b.qp, &[sg]);
    let inv = Wr {
        opcode: sq_op::SEND_INV,
        signaled: true,
        sges: vec![net.a.src.sg(0, 64)],
        hdr_low: stag,
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &inv);
    let (sc, rc) = net.complete(true);
    assert_eq!((sc[0].error(), rc[0].error()), (None, None));
    assert_eq!(rc[0].qw[2] as u32, stag, "invalidated STag reported");
    let rd = Wr {
        opcode: sq_op::RDMA_READ,
        signaled: true,
        sges: vec![net.a.dst.sg(0, 8)],
        hdr_low: stag,
        qw2: iova,
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &rd);
    let (sc, _) = net.complete(false);
    assert_eq!(sc[0].error(), Some((cqe::MAJERR_FLUSH, flush::REM_ACCESS)));
}

#[test]
fn ud_over_the_wire_delivers_the_ipv4_header_in_the_grh_slot() {
    let mut net = Net::new(1 << 20, Path::default());
    let ah = CreateAh {
        hdr: Host::hdr(admin_op::CREATE_AH),
        ah_id: 5,
        pd: 1,
        attrs: QpAttrs {
            dgid: gid(2),
            dmac: mac(2),
            av_flags: AV_FLAG_IPV4,
            hop_limit: 64,
            udp_sport: 0xd000,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(net.a.h.admin(ah.encode()), admin_status::OK);
    let data = pattern(200, 3);
    net.a.h.write(net.a.src.gpa, &data);
    let sg = net.b.dst.sg(0, 40 + 200);
    net.b.h.post_recv(&mut net.b.ud, &[sg]);
    let wr = Wr {
        opcode: sq_op::SEND,
        signaled: true,
        imm: Some(0xabcd),
        sges: vec![net.a.src.sg(0, 200)],
        hdr_low: 5,
        qw2: (u64::from(UDQPN) << 32) | u64::from(QKEY),
        ..Default::default()
    };
    net.a.h.send(&mut net.a.ud, &wr);
    let (sc, rc) = net.complete(true);
    assert_eq!(sc[0].error(), None);
    let c = rc[0];
    assert_eq!(c.error(), None);
    assert_eq!(c.len(), 240);
    assert_eq!(c.imm(), Some(0xabcd));
    assert_eq!(c.qw[2] as u32 & 0xff_ffff, UDQPN, "source QP");
    let got = net.b.h.read(net.b.dst.gpa, 240);
    assert_eq!(got[..20], [0; 20]);
    assert_eq!(got[20] >> 4, 4, "IPv4 header at byte 20");
    assert_eq!(got[32..36], [10, 0, 0, 1]);
    assert_eq!(got[36..40], [10, 0, 0, 2]);
    assert_eq!(got[40..], data[..]);
    // A wrong Q_Key is dropped.
    let sg = net.b.dst.sg(0, 240);
    net.b.h.post_recv(&mut net.b.ud, &[sg]);
    let drops = net.b.h.stats().rx_drops;
    let wr = Wr {
        qw2: (u64::from(UDQPN) << 32) | u64::from(QKEY ^ 1),
        ..wr
    };
    net.a.h.send(&mut net.a.ud, &wr);
    net.run(|_| false);
    assert_eq!(net.b.h.stats().rx_drops, drops + 1);
    assert!(net.b.h.poll_cq(&mut net.b.rcq).is_empty());
}

/// A UD datagram over a VLAN: its CQE carries the TCI and the source MAC (Linux's CM answers
/// from the GID of that VLAN), on the wire and on loopback; an untagged one does not.
#[test]
fn ud_over_a_vlan_reports_the_tci_and_source_mac_in_the_cqe() {
    let mut net = Net::build(1 << 20, Path::default(), true);
    let ah = |dgid| CreateAh {
        hdr: Host::hdr(admin_op::CREATE_AH),
        ah_id: 5,
        pd: 1,
        attrs: QpAttrs {
            dgid,
            dmac: mac(2),
            av_flags: AV_FLAG_VLAN,
            vlan_id: 100,
            traffic_class: 0x68,
            hop_limit: 64,
            udp_sport: 0xd000,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(net.a.h.admin(ah(gid6(2)).encode()), admin_status::OK);
    let wr = Wr {
        opcode: sq_op::SEND,
        signaled: true,
        sges: vec![net.a.src.sg(0, 64)],
        hdr_low: 5,
        qw2: (u64::from(UDQPN) << 32) | u64::from(QKEY),
        ..Default::default()
    };
    net.b.h.post_recv(&mut net.b.ud, &[net.b.dst.sg(0, 104)]);
    net.a.h.send(&mut net.a.ud, &wr);
    let (_, rc) = net.complete(true);
    let ext = rc[0].ext.expect("an extended CQE");
    assert_eq!(ext[3] >> cqe::UDVLANVALID & 1, 1);
    assert_eq!(ext[3] >> cqe::UDSMACVALID & 1, 1);
    assert_eq!(ext[3] >> cqe::IMMVALID & 1, 0);
    // PCP 3 (traffic class 0x68 >> 5), VLAN 100.
    assert_eq!(ext[2] >> 48, (3 << 13) | 100);
    assert_eq!(
        ext[2] & 0xffff_ffff_ffff,
        0x0200_0000_1001,
        "source MAC {:#x}",
        ext[2]
    );
    // Loopback to its own GID through the same VLAN: the same report.
    assert_eq!(
        net.a.h.admin(Host::object(admin_op::DESTROY_AH, 5)),
        admin_status::OK
    );
    assert_eq!(net.a.h.admin(ah(gid6(1)).encode()), admin_status::OK);
    net.a.h.post_recv(&mut net.a.ud, &[net.a.dst.sg(0, 104)]);
    net.a.h.send(&mut net.a.ud, &wr);
    net.run(|_| false);
    let c = net.a.h.poll_cq(&mut net.a.rcq);
    let ext = c[0].ext.expect("an extended CQE");
    assert_eq!(ext[2] >> 48, (3 << 13) | 100);
    // Untagged: no extension without immediate data.
    assert_eq!(
        net.a.h.admin(Host::object(admin_op::DESTROY_AH, 5)),
        admin_status::OK
    );
    let mut plain = ah(gid6(2));
    plain.attrs.av_flags = 0;
    assert_eq!(net.a.h.admin(plain.encode()), admin_status::OK);
    net.b.h.post_recv(&mut net.b.ud, &[net.b.dst.sg(0, 104)]);
    net.a.h.send(&mut net.a.ud, &wr);
    let (_, rc) = net.complete(true);
    assert_eq!(rc[0].ext, None);
}

/// MCAST_ATTACH or MCAST_DETACH of `qp` to `group`.
fn mcast(h: &mut Host, op: u8, qp: u32, group: [u8; 16]) -> u16 {
    h.admin(
        McastCmd {
            hdr: Host::hdr(op),
            qp_id: qp,
            gid: group,
            ..Default::default()
        }
        .encode(),
    )
}

#[test]
fn ud_multicast_reaches_every_attached_qp_here_and_on_the_wire() {
    let mut net = Net::new(1 << 20, Path::default());
    // 239.1.2.3 and its MAC.
    let group = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 2, 3];
    let group_mac = [0x01, 0x00, 0x5e, 0x01, 0x02, 0x03];
    // B: its UD QP and a second one, both with the group's Q_Key; A: its own UD QP too
    // (multicast loopback).
    let mut b2 = net.b.h.create_qp(7, QP_TYPE_UD, 1, 1, 2, 256, 64, 2);
    net.b.h.ud_to_rts(7, QKEY);
    for qp in [UDQPN, 7] {
        assert_eq!(
            mcast(&mut net.b.h, admin_op::MCAST_ATTACH, qp, group),
            admin_status::OK
        );
    }
    assert_eq!(
        mcast(&mut net.a.h, admin_op::MCAST_ATTACH, UDQPN, group),
        admin_status::OK
    );
    let ah = CreateAh {
        hdr: Host::hdr(admin_op::CREATE_AH),
        ah_id: 5,
        pd: 1,
        attrs: QpAttrs {
            dgid: group,
            dmac: group_mac,
            av_flags: AV_FLAG_IPV4,
            hop_limit: 1,
            udp_sport: 0xd000,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(net.a.h.admin(ah.encode()), admin_status::OK);
    let data = pattern(300, 9);
    net.a.h.write(net.a.src.gpa, &data);
    net.b.h.post_recv(&mut net.b.ud, &[net.b.dst.sg(0, 340)]);
    net.b.h.post_recv(&mut b2, &[net.b.dst.sg(4096, 340)]);
    net.a.h.post_recv(&mut net.a.ud, &[net.a.dst.sg(0, 340)]);
    let wr = Wr {
        opcode: sq_op::SEND,
        signaled: true,
        imm: Some(0x600d),
        sges: vec![net.a.src.sg(0, 300)],
        hdr_low: 5,
        qw2: (u64::from(MCAST_QPN) << 32) | u64::from(QKEY),
        ..Default::default()
    };
    net.a.h.send(&mut net.a.ud, &wr);
    let tx = net.a.h.dev().take_tx();
    assert_eq!(tx.len(), 1, "one frame on the wire for the group");
    assert_eq!(tx[0][..6], group_mac);
    let p = crate::wire::parse(&tx[0]).unwrap();
    assert_eq!(p.headers.bth.dest_qp, MCAST_QPN);
    net.carry(tx, true);
    net.run(|_| false);
    let mut got = net.b.h.poll_cq(&mut net.b.rcq);
    got.sort_by_key(|c| c.qp_id());
    assert_eq!(got.len(), 2, "{got:?}");
    for (c, qp, off) in [(got[0], UDQPN, 0), (got[1], 7, 4096)] {
        assert_eq!((c.error(), c.qp_id(), c.len()), (None, qp, 340));
        assert_eq!(c.imm(), Some(0x600d));
        assert_eq!(c.qw[2] as u32 & 0xff_ffff, UDQPN, "source QP");
        let m = net.b.h.read(net.b.dst.gpa + off, 340);
        assert_eq!(
            m[36..40],
            [239, 1, 2, 3],
            "the group is the GRH's destination"
        );
        assert_eq!(m[40..], data[..]);
    }
    // A's own attached QP got its loopback copy.
    let c = net.a.h.poll_cq(&mut net.a.rcq);
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].error(), c[0].qp_id(), c[0].len()), (None, UDQPN, 340));
    assert_eq!(net.a.h.read(net.a.dst.gpa + 40, 300), data);
    // A datagram to the group's MAC and GID that names one QP instead of the multicast QPN
    // reaches no QP: dropped and counted.
    net.b.h.post_recv(&mut net.b.ud, &[net.b.dst.sg(0, 340)]);
    let drops = net.b.h.stats().rx_drops;
    let one_qp = Wr {
        qw2: (u64::from(UDQPN) << 32) | u64::from(QKEY),
        ..wr.clone()
    };
    net.a.h.send(&mut net.a.ud, &one_qp);
    net.run(|_| false);
    assert!(net.b.h.poll_cq(&mut net.b.rcq).is_empty());
    assert_eq!(net.b.h.stats().rx_drops, drops + 1);
    // Once B has left the group, its frames are filtered: nothing delivered, nothing
    // counted, not even as a drop.
    assert_eq!(
        mcast(&mut net.b.h, admin_op::MCAST_DETACH, UDQPN, group),
        admin_status::OK
    );
    assert_eq!(
        mcast(&mut net.b.h, admin_op::MCAST_DETACH, 7, group),
        admin_status::OK
    );
    assert_eq!(
        mcast(&mut net.b.h, admin_op::MCAST_DETACH, 7, group),
        admin_status::NOT_FOUND
    );
    net.b.h.post_recv(&mut net.b.ud, &[net.b.dst.sg(0, 340)]);
    let (drops, counters) = (net.b.h.stats().rx_drops, net.b.h.counters());
    net.a.h.send(&mut net.a.ud, &wr);
    net.run(|_| false);
    assert!(net.b.h.poll_cq(&mut net.b.rcq).is_empty());
    assert_eq!(net.b.h.stats().rx_drops, drops);
    assert_eq!(net.b.h.counters(), counters);
}

#[test]
fn many_small_messages_in_flight_complete_in_order() {
    let mut net = Net::new(1 << 20, Path::default());
    net.faults(lossy(), 3);
    for i in 0..100u32 {
        let sg = net.b.dst.sg(u64::from(i) * 100, 100);
        net.b.h.post_recv(&mut net.b.qp, &[sg]);
    }
    let data = pattern(10_000, 5);
    net.a.h.write(net.a.src.gpa, &data);
    for i in 0..100u32 {
        let wr = Wr {
            opcode: sq_op::SEND,
            signaled: i % 3 == 0 || i == 99,
            sges: vec![net.a.src.sg(u64::from(i) * 100, 100)],
            ..Default::default()
        };
        net.a.h.post_send(&mut net.a.qp, &wr);
    }
    net.a.h.ring_sq(&net.a.qp);
    let (mut sc, mut rc) = (Vec::new(), Vec::new());
    assert!(net.run(|n| {
        sc.extend(n.a.h.poll_cq(&mut n.a.scq));
        rc.extend(n.b.h.poll_cq(&mut n.b.rcq));
        rc.len() == 100 && sc.len() == 34
    }));
    let idx: Vec<u32> = sc.iter().map(|c| c.wqe_idx()).collect();
    assert!(idx.windows(2).all(|w| w[0] < w[1]), "{idx:?}");
    assert_eq!(net.b.h.read(net.b.dst.gpa, 10_000), data);
}

/// Polls `cq` on the wall clock until `n` CQEs arrived (the engine threads do the work).
fn wait_cqes(h: &Host, cq: &mut CqH, n: usize) -> Vec<Cqe> {
    let t0 = std::time::Instant::now();
    let mut out = Vec::new();
    while out.len() < n {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "timed out waiting for {n} CQEs: {out:?}"
        );
        out.extend(h.poll_cq(cq));
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    out
}

/// The process as `main` builds it: two NICs with engine threads on a real hub (switch
/// thread, a LAN socket, pcap), the real clock. RC traffic between the NICs goes engine to
/// engine through the switch; a plain LAN station exchanges UD RoCE frames with NIC A.
#[test]
fn nics_and_a_lan_station_on_a_running_fabric() {
    use crate::fabric::hub::Faults;
    use crate::fabric::stream::{encode, Decoder};
    use crate::wire::{bth::Bth, eth::EthHeader, ext::Deth, ipv4::Ipv4Header};
    use crate::wire::{ExtHeaders, Headers, IpHeader};
    use std::io::{Read, Write};

    let Running {
        dir,
        lan,
        cap,
        hub,
        mut a,
        mut b,
        engines,
    } = Running::start("lan", Faults::default());
    let p = Path {
        mtu: 3,
        timeout: 14,
        ..Path::default()
    };
    a.connect(2, p, 100, 200);
    b.connect(1, p, 200, 100);

    // SEND, WRITE and READ between the NICs.
    let data = pattern(1 << 20, 77);
    a.h.write(a.src.gpa, &data);
    let sg = b.dst.sg(0, 100_000);
    b.h.post_recv(&mut b.qp, &[sg]);
    let send = Wr {
        opcode: sq_op::SEND,
        signaled: true,
        sges: vec![a.src.sg(0, 100_000)],
        ..Default::default()
    };
    a.h.send(&mut a.qp, &send);
    let c = wait_cqes(&b.h, &mut b.rcq, 1);
    assert_eq!((c[0].error(), c[0].len()), (None, 100_000));
    assert_eq!(b.h.read(b.dst.gpa, 100_000), data[..100_000]);
    let write = Wr {
        opcode: sq_op::RDMA_WRITE,
        signaled: true,
        sges: vec![a.src.sg(0, 1 << 20)],
        hdr_low: b.dst.stag,
        qw2: b.dst.va,
        ..Default::default()
    };
    a.h.send(&mut a.qp, &write);
    let read = Wr {
        opcode: sq_op::RDMA_READ,
        signaled: true,
        sges: vec![a.dst.sg(0, 1 << 20)],
        hdr_low: b.dst.stag,
        qw2: b.dst.va,
        ..Default::default()
    };
    a.h.send(&mut a.qp, &read);
    let c = wait_cqes(&a.h, &mut a.scq, 3);
    assert!(c.iter().all(|c| c.error().is_none()), "{c:?}");
    assert_eq!(b.h.read(b.dst.gpa, 1 << 20), data);
    assert_eq!(a.h.read(a.dst.gpa, 1 << 20), data);

    // A LAN station (say a VM with rxe) sends a UD RoCE frame to NIC A's UD QP...
    let station = [0x52, 0x54, 0, 0, 0, 0x77];
    let mut conn = std::os::unix::net::UnixStream::connect(&lan).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let sg = a.dst.sg(0, 40 + 16);
    a.h.post_recv(&mut a.ud, &[sg]);
    let h = Headers {
        eth: EthHeader {
            dst: mac(1),
            src: station,
            vlan: None,
        },
        ip: IpHeader::V4(Ipv4Header {
            src: [10, 0, 0, 77],
            dst: [10, 0, 0, 1],
            traffic_class: 0,
            ttl: 64,
            identification: 1,
        }),
        udp_src_port: 0xc077,
        bth: Bth {
            opcode: crate::wire::opcode::UD_SEND_ONLY,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: UDQPN,
            ack_req: false,
            psn: 1,
        },
        ext: ExtHeaders {
            deth: Some(Deth {
                qkey: QKEY,
                src_qp: 9,
            }),
            ..Default::default()
        },
    };
    let frame = crate::wire::build(&h, b"hello from rxe!!").unwrap();
    let mut out = Vec::new();
    encode(&frame, &mut out).unwrap();
    conn.write_all(&out).unwrap();
    let c = wait_cqes(&a.h, &mut a.rcq, 1);
    assert_eq!((c[0].error(), c[0].len()), (None, 56));
    assert_eq!(a.h.read(a.dst.gpa + 40, 16), b"hello from rxe!!");
    assert_eq!(a.h.read(a.dst.gpa + 32, 4), [10, 0, 0, 77]);

    // ...and NIC A answers it (the station's MAC was learned on the LAN port).
    let ah = CreateAh {
        hdr: Host::hdr(admin_op::CREATE_AH),
        ah_id: 6,
        pd: 1,
        attrs: QpAttrs {
            dgid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 77],
            dmac: station,
            av_flags: AV_FLAG_IPV4,
            hop_limit: 64,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(a.h.admin(ah.encode()), admin_status::OK);
    a.h.write(a.src.gpa, b"hello from NIC A");
    let wr = Wr {
        opcode: sq_op::SEND,
        signaled: true,
        sges: vec![a.src.sg(0, 16)],
        hdr_low: 6,
        qw2: (9u64 << 32) | u64::from(QKEY),
        ..Default::default()
    };
    a.h.send(&mut a.ud, &wr);
    let mut dec = Decoder::new();
    let mut got = None;
    let mut buf = [0u8; 4096];
    while got.is_none() {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0);
        dec.feed(&buf[..n], |f| {
            if let Ok(p) = crate::wire::parse(f) {
                if p.headers.bth.dest_qp == 9 {
                    got = Some(p.payload.to_vec());
                }
            }
        })
        .unwrap();
    }
    assert_eq!(got.as_deref(), Some(&b"hello from NIC A"[..]));
    drop(engines);

    // Everything the switch forwarded is in the capture (the file the hub wrote, flushed at
    // the latest FLUSH_DELAY later or on request) and parses, ICRC included, here and in
    // tshark.
    hub.control.flush_capture();
    let file = std::fs::read(&cap).unwrap();
    let frames = pcap_frames(&file);
    tshark_check(&file, frames.len());
    assert!(
        frames.len() > 2 * (1 << 20) / 1024,
        "{} frames",
        frames.len()
    );
    for f in &frames {
        crate::wire::parse(f).unwrap();
    }
    drop(hub);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ipv6_with_vlan_under_loss() {
    let p = Path {
        mtu: 4,
        ..Path::default()
    };
    let mut net = Net::build(1 << 20, p, true);
    net.faults(lossy(), 6);
    net.pcap = Some(PcapWriter::new(Vec::new()).unwrap());
    let mut seed = 3u8;
    for len in [7u64, 2048, 300_000] {
        for op in ALL_OPS {
            seed = seed.wrapping_add(5);
            transfer(&mut net, op, len, seed);
        }
    }
    let cap = net.pcap.take().unwrap().into_inner();
    let frames = pcap_frames(&cap);
    for f in &frames {
        let p = crate::wire::parse(f).unwrap();
        assert!(matches!(p.headers.ip, crate::wire::IpHeader::V6(_)));
        assert_eq!(p.headers.eth.vlan.map(|v| (v.vid, v.pcp)), Some((5, 3)));
    }
    tshark_check(&cap, frames.len());
}

/// SplitMix64 for the hostile-frame test (the sequence depends only on the seed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Frames with valid checksums and ICRC but hostile contents (any opcode, PSN, QPN, RETH,
/// AETH, length), plus raw byte damage, sent to both NICs in the middle of real traffic:
/// no panic, no write outside guest RAM, and the engines keep working for a fresh pair of
/// QPs afterwards.
#[test]
fn hostile_frames_do_not_break_the_engines() {
    use crate::wire::aeth::{Aeth, NakCode, Syndrome};
    use crate::wire::ext::Reth;
    let mut net = Net::new(1 << 20, Path::default());
    net.pcap = Some(PcapWriter::new(Vec::new()).unwrap());
    for (i, op) in ALL_OPS.iter().enumerate() {
        transfer(&mut net, *op, 5000, i as u8);
    }
    let cap = net.pcap.take().unwrap().into_inner();
    let frames = pcap_frames(&cap);
    let mut rng = Rng(0xfe10);
    let opcodes: Vec<u8> = (0u8..=0x17).chain([0x64, 0x65, 0x81, 0x20, 0x24]).collect();
    let mut delivered = 0u32;
    for round in 0..20_000u32 {
        let base = &frames[rng.below(frames.len() as u64) as usize];
        let Ok(p) = crate::wire::parse(base) else {
            continue;
        };
        let mut h = p.headers;
        let mut payload = p.payload.to_vec();
        match rng.below(8) {
            0 => h.bth.psn = rng.below(1 << 24) as u32,
            1 => h.bth.dest_qp = rng.below(8) as u32,
            2 => h.bth.opcode = opcodes[rng.below(opcodes.len() as u64) as usize],
            3 => payload.resize(rng.below(5000) as usize, 0xee),
            4 => {
                h.ext.reth = Some(Reth {
                    va: rng.next(),
                    rkey: rng.next() as u32,
                    dma_len: rng.next() as u32,
                })
            }
            5 => {
                let syndrome = match rng.below(3) {
                    0 => Syndrome::Ack { credits: 0x1f },
                    1 => Syndrome::RnrNak {
                        timer: rng.below(32) as u8,
                    },
                    _ => Syndrome::Nak(NakCode::PsnSequenceError),
                };
                h.ext.aeth = Some(Aeth {
                    syndrome,
                    msn: rng.below(1 << 24) as u32,
                });
            }
            6 => h.bth.psn = h.bth.psn.wrapping_add(rng.below(5) as u32) & 0xff_ffff,
            _ => {}
        }
        // Make the extension headers fit the opcode (or not, sometimes) and rebuild.
        if let Some(info) = crate::wire::opcode::info(h.bth.opcode) {
            if rng.below(4) != 0 {
                let r = h.ext.reth.unwrap_or(Reth {
                    va: net.b.dst.va,
                    rkey: net.b.dst.stag,
                    dma_len: payload.len() as u32,
                });
                h.ext.reth = info.reth.then_some(r);
                h.ext.aeth = info.aeth.then_some(h.ext.aeth.unwrap_or(Aeth {
                    syndrome: Syndrome::Ack { credits: 0x1f },
                    msn: 0,
                }));
                h.ext.deth = info.deth.then_some(crate::wire::ext::Deth {
                    qkey: QKEY,
                    src_qp: 1,
                });
                h.ext.immdt = info.immdt.then_some(7);
                // An STag with no MR (a real one would be invalidated for good and the
                // final check would fail for that reason alone).
                h.ext.ieth = info.ieth.then_some(0x7733);
                if !info.payload {
                    payload.clear();
                }
            }
        }
        let Ok(mut f) = crate::wire::build(&h, &payload) else {
            continue;
        };
        if round % 10 == 0 {
            // Raw damage: the parser must refuse it cleanly.
            let at = rng.below(f.len() as u64) as usize;
            f[at] ^= 1 << rng.below(8);
            if round % 20 == 0 {
                f.truncate(rng.below(f.len() as u64) as usize);
            }
        }
        if round % 300 == 0 {
            reconnect(&mut net, h.bth.psn);
        }
        if round % 30 == 0 {
            // Real traffic to interfere with: a receive, a SEND and a READ in flight.
            let sg = net.b.dst.sg(0, 6000);
            net.b.h.post_recv(&mut net.b.qp, &[sg]);
            for opcode in [sq_op::SEND, sq_op::RDMA_READ] {
                let wr = Wr {
                    opcode,
                    signaled: true,
                    sges: vec![net.a.dst.sg(0, 5000)],
                    hdr_low: net.b.src.stag,
                    qw2: net.b.src.va,
                    ..Default::default()
                };
                net.a.h.send(&mut net.a.qp, &wr);
            }
        }
        net.a.h.dev().rx_frame(&f);
        net.b.h.dev().rx_frame(&f);
        delivered += 1;
        if round % 100 == 0 {
            let now = net.now();
            net.clock.store(now + 5_000, Ordering::Relaxed);
            net.a.h.dev().tick();
            net.b.h.dev().tick();
        }
        // Whatever the engines answer goes to the other side (bounded by the outbox).
        let fa = net.a.h.dev().take_tx();
        let fb = net.b.h.dev().take_tx();
        assert!(fa.len() <= MAX_OUTBOX && fb.len() <= MAX_OUTBOX);
        for f in fb.iter().take(16) {
            net.a.h.dev().rx_frame(f);
        }
        for f in fa.iter().take(16) {
            net.b.h.dev().rx_frame(f);
        }
        // Keep the CQs drained so they do not stop.
        net.a.h.poll_cq(&mut net.a.scq);
        net.a.h.poll_cq(&mut net.a.rcq);
        net.b.h.poll_cq(&mut net.b.scq);
        net.b.h.poll_cq(&mut net.b.rcq);
    }
    assert!(net.a.h.guards_intact() && net.b.h.guards_intact());
    let (sa, sb) = (net.a.h.stats(), net.b.h.stats());
    eprintln!("hostile frames: {delivered} delivered; A {sa:?}; B {sb:?}");
    assert!(delivered > 15_000 && sa.rx_drops > 1000 && sb.rx_drops > 1000);
    assert!(sa.rx_packets > 100 && sb.rx_packets > 100 && sa.aeqes > 5 && sb.aeqes > 5);
    // The engines still work after all that.
    reconnect(&mut net, 0x500);
    transfer(&mut net, Op::Send, 10_000, 1);
    transfer(&mut net, Op::Read, 10_000, 2);
}

/// Both RC QPs back to RESET (rings cleared, as a fresh QP) and connected again with `psn`.
fn reconnect(net: &mut Net, psn: u32) {
    let reset = QpAttrs {
        state: qp_state::RESET,
        ..Default::default()
    };
    for (n, peer) in [(&mut net.a, 2u8), (&mut net.b, 1u8)] {
        assert_eq!(n.h.modify(QPN, qp_attr::STATE, reset), 0);
        n.h.poll_cq(&mut n.scq);
        n.h.poll_cq(&mut n.rcq);
        n.qp.sq_head = 0;
        n.qp.sq_pol = true;
        n.qp.rq_head = 0;
        n.qp.rq_pol = true;
        for pg in n.qp.sq_pages.iter().chain(&n.qp.rq_pages) {
            n.h.write(*pg, &[0u8; 4096]);
        }
        n.connect(peer, Path::default(), psn, psn);
    }
}

/// A lost READ response is asked for again at once (not after the ACK timeout), and a SEND
/// acknowledged while that READ was incomplete completes right after the READ.
#[test]
fn lost_read_response_recovers_without_waiting_for_the_timer() {
    let p = Path {
        timeout: 20, // 4.3 s: any wait for it would show.
        ..Path::default()
    };
    let mut net = Net::new(1 << 20, p);
    let mut dropped = false;
    net.drop_to_a = Some(Box::new(move |f| {
        let Ok(p) = crate::wire::parse(f) else {
            return false;
        };
        let hit = !dropped && p.headers.bth.opcode == crate::wire::opcode::RC_READ_RESPONSE_MIDDLE;
        dropped |= hit;
        hit
    }));
    let data = pattern(100_000, 4);
    net.b.h.write(net.b.src.gpa, &data);
    let sg = net.b.dst.sg(0, 100);
    net.b.h.post_recv(&mut net.b.qp, &[sg]);
    let read = Wr {
        opcode: sq_op::RDMA_READ,
        signaled: true,
        sges: vec![net.a.dst.sg(0, 100_000)],
        hdr_low: net.b.src.stag,
        qw2: net.b.src.va,
        ..Default::default()
    };
    let send = Wr {
        opcode: sq_op::SEND,
        signaled: true,
        sges: vec![net.a.src.sg(0, 100)],
        ..Default::default()
    };
    let t0 = net.now();
    net.a.h.post_send(&mut net.a.qp, &read);
    net.a.h.post_send(&mut net.a.qp, &send);
    net.a.h.ring_sq(&net.a.qp);
    let mut sc = Vec::new();
    assert!(net.run(|n| {
        sc.extend(n.a.h.poll_cq(&mut n.a.scq));
        sc.len() == 2
    }));
    assert!(sc.iter().all(|c| c.error().is_none()), "{sc:?}");
    assert_eq!(net.a.h.read(net.a.dst.gpa, 100_000), data);
    let took = net.now() - t0;
    assert!(took < 100_000, "took {took} us of device time");
}

/// The requester reads each packet's payload from guest memory as it builds the frame: when
/// the source MR is gone by then (here deregistered while the window waited for ACKs, so the
/// retransmission reads it again), the WRITE completes with a protection error and the QP
/// reports a local access error, as it would had the MR been gone when the WQE was taken.
#[test]
fn source_mr_gone_mid_write_is_a_local_protection_error() {
    use std::sync::atomic::AtomicBool;
    let p = Path {
        mtu: 3,
        ..Path::default()
    };
    let mut net = Net::new(1 << 20, p);
    let blocked = Arc::new(AtomicBool::new(true));
    let block = Arc::clone(&blocked);
    net.drop_to_a = Some(Box::new(move |_| block.load(Ordering::Relaxed)));
    net.a.h.write(net.a.src.gpa, &pattern(1 << 20, 9));
    let faults = net.a.h.dev().engine().stats().dma_faults;
    let wr = net.b.dst.write_from(&net.a.src, 1 << 20);
    net.a.h.send(&mut net.a.qp, &wr);
    // No ACK reaches A: it stops at its window, far short of the 1024 packets.
    assert!(net.run(|_| true));
    let got = net.b.h.read(net.b.dst.gpa, 1 << 20);
    assert!(got[..64 << 10] == pattern(1 << 20, 9)[..64 << 10]);
    assert!(got[(1 << 20) - 1024..].iter().all(|&b| b == 0));
    assert!(net.a.h.poll_cq(&mut net.a.scq).is_empty());
    assert_eq!(
        net.a
            .h
            .admin(Host::object(admin_op::DEREG_MR, net.a.src.stag)),
        0
    );
    blocked.store(false, Ordering::Relaxed);
    let mut sc = Vec::new();
    assert!(net.run(|n| {
        sc.extend(n.a.h.poll_cq(&mut n.a.scq));
        !sc.is_empty()
    }));
    assert_eq!(sc[0].error(), Some((1, flush::PROT)), "{sc:?}");
    assert_eq!(net.a.h.dev().engine().stats().dma_faults, faults + 1);
}

/// Two NICs with engine threads on a running hub (with one LAN socket and a pcap file).
struct Running {
    dir: std::path::PathBuf,
    lan: std::path::PathBuf,
    cap: std::path::PathBuf,
    hub: crate::fabric::hub::Hub,
    a: Nic,
    b: Nic,
    engines: (crate::shared::EngineThread, crate::shared::EngineThread),
}

impl Running {
    fn start(tag: &str, faults: crate::fabric::hub::Faults) -> Self {
        Self::start_with(tag, faults, Some(crate::fabric::pcap::SNAPLEN))
    }

    /// With a capture of `snaplen` bytes per frame, or none.
    fn start_with(tag: &str, faults: crate::fabric::hub::Faults, snaplen: Option<u32>) -> Self {
        use crate::device::TxSink;
        use crate::fabric::hub::{Hub, NicAttachment, ENGINE_QUEUE};
        use crate::fabric::queue::frame_queue;
        use crate::shared::spawn_engine;
        let dir = std::env::temp_dir().join(format!("ferrdma-wire-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (lan, cap) = (dir.join("lan.sock"), dir.join("cap.pcap"));
        let (txa, rxa) = frame_queue(ENGINE_QUEUE);
        let (txb, rxb) = frame_queue(ENGINE_QUEUE);
        let nics = vec![
            NicAttachment {
                mac: mac(1),
                inbound: txa,
            },
            NicAttachment {
                mac: mac(2),
                inbound: txb,
            },
        ];
        let capture = snaplen.map(|snaplen| crate::fabric::pcap::Capture {
            path: cap.clone(),
            snaplen,
        });
        let hub = Hub::start(std::slice::from_ref(&lan), capture.as_ref(), nics, faults).unwrap();
        let start = std::time::Instant::now();
        let a = Nic::with_clock(1, Clock::Real(start), 16 << 20);
        let b = Nic::with_clock(2, Clock::Real(start), 16 << 20);
        for (n, port) in [&a, &b].into_iter().zip(hub.engine_ports.iter().cloned()) {
            n.h.dev().set_sink(TxSink(Box::new(move |f| port.send(f))));
        }
        let ea = spawn_engine("a", a.h.shared.clone(), Some(rxa)).unwrap();
        let eb = spawn_engine("b", b.h.shared.clone(), Some(rxb)).unwrap();
        Running {
            dir,
            lan,
            cap,
            hub,
            a,
            b,
            engines: (ea, eb),
        }
    }
}

/// `--nic-fault` on both engines of a running hub: 1% loss, duplication, reordering and
/// delay on the real clock; 4 MiB WRITE and READ still arrive intact.
#[test]
fn running_fabric_with_faults_on_the_engine_ports() {
    use crate::fabric::hub::Faults;
    let cfg = lossy();
    let faults = Faults {
        per_nic: [(0, cfg), (1, cfg)].into_iter().collect(),
        seed: 11,
        ..Faults::default()
    };
    let Running {
        dir,
        cap,
        hub,
        mut a,
        mut b,
        engines,
        ..
    } = Running::start("nicfault", faults);
    let p = Path {
        mtu: 5,
        timeout: 12, // 16.8 ms
        ..Path::default()
    };
    a.connect(2, p, 7, 9);
    b.connect(1, p, 9, 7);
    let len = 4u32 << 20;
    let data = pattern(len as usize, 12);
    a.h.write(a.src.gpa, &data);
    let write = Wr {
        opcode: sq_op::RDMA_WRITE,
        signaled: true,
        sges: vec![a.src.sg(0, len)],
        hdr_low: b.dst.stag,
        qw2: b.dst.va,
        ..Default::default()
    };
    a.h.send(&mut a.qp, &write);
    let read = Wr {
        opcode: sq_op::RDMA_READ,
        signaled: true,
        sges: vec![a.dst.sg(0, len)],
        hdr_low: b.dst.stag,
        qw2: b.dst.va,
        ..Default::default()
    };
    a.h.send(&mut a.qp, &read);
    let c = wait_cqes(&a.h, &mut a.scq, 2);
    assert!(c.iter().all(|c| c.error().is_none()), "{c:?}");
    assert!(b.h.read(b.dst.gpa, len as usize) == data);
    assert!(a.h.read(a.dst.gpa, len as usize) == data);
    drop(engines);
    hub.control.flush_capture();
    // Recovery shows in the capture (taken before the faults): resent packets.
    let frames = pcap_frames(&std::fs::read(&cap).unwrap()).len();
    eprintln!("{frames} frames for 2 x 1024 data packets");
    assert!(
        frames > 2 * 1024 + 200,
        "{frames} frames: no retransmission?"
    );
    drop(hub);
    let _ = std::fs::remove_dir_all(&dir);
}

/// GSI (QP1) traffic, as the kernel CM sends it: QP1 to QP1 with the well-known Q_Key over
/// IPv4, the receiver seeing the sender's IPv4 header and QP number.
#[test]
fn gsi_qp1_to_qp1_over_the_wire() {
    const QP1_QKEY: u32 = 0x8001_0000;
    let mut net = Net::new(1 << 20, Path::default());
    let mut gsi = Vec::new();
    for n in [&mut net.a, &mut net.b] {
        let q = n.h.create_qp(1, QP_TYPE_GSI, 1, 1, 2, 64, 16, 2);
        n.h.ud_to_rts(1, QP1_QKEY);
        gsi.push(q);
    }
    let mut gb = gsi.pop().unwrap();
    let mut ga = gsi.pop().unwrap();
    net.ah_to_b(1);
    let mad = pattern(256, 0x6d);
    net.a.h.write(net.a.src.gpa, &mad);
    let sg = net.b.dst.sg(0, 40 + 256);
    net.b.h.post_recv(&mut gb, &[sg]);
    let wr = Wr {
        opcode: sq_op::SEND,
        signaled: true,
        sges: vec![net.a.src.sg(0, 256)],
        hdr_low: 1,
        qw2: (1u64 << 32) | u64::from(QP1_QKEY),
        ..Default::default()
    };
    net.a.h.send(&mut ga, &wr);
    let (sc, rc) = net.complete(true);
    assert_eq!(sc[0].error(), None);
    assert_eq!((rc[0].error(), rc[0].len()), (None, 296));
    assert_eq!(rc[0].qp_id(), 1);
    assert_eq!(rc[0].qw[2] as u32 & 0xff_ffff, 1, "source QP 1");
    let got = net.b.h.read(net.b.dst.gpa, 296);
    assert_eq!(got[32..40], [10, 0, 0, 1, 10, 0, 0, 2]);
    assert_eq!(got[40..], mad[..]);
}

/// Q_Key spoofing (issue 14, defect 8): a user (unprivileged) UD QP that puts GSI's
/// controlled Q_Key 0x8001_0000 in its WQE to forge a CM MAD to the peer's QP1 sends its own
/// Q_Key instead, so QP1 drops the datagram (counted in `rx_drops`) and never sees it; the
/// same WQE from a privileged (kernel) UD QP is delivered. The substitution is visible: the
/// user QP's controlled-key WQE to a peer UD QP whose Q_Key is the user QP's own arrives.
#[test]
fn controlled_qkey_of_an_unprivileged_ud_qp_never_reaches_gsi() {
    const QP1_QKEY: u32 = 0x8001_0000;
    const KQPN: u32 = 9;
    let mut net = Net::new(1 << 20, Path::default());
    let mut gsi = net.b.h.create_qp(1, QP_TYPE_GSI, 1, 1, 2, 64, 16, 2);
    net.b.h.ud_to_rts(1, QP1_QKEY);
    let mut kud = net
        .a
        .h
        .create_qp_flags(QP_FLAG_PRIVILEGED, KQPN, QP_TYPE_UD, 1, 1, 2, 64, 16, 2);
    net.a.h.ud_to_rts(KQPN, 0x4444);
    net.ah_to_b(1);
    let mad = pattern(256, 0x6d);
    net.a.h.write(net.a.src.gpa, &mad);
    let forged = Wr {
        opcode: sq_op::SEND,
        signaled: true,
        sges: vec![net.a.src.sg(0, 256)],
        hdr_low: 1,
        qw2: (1u64 << 32) | u64::from(QP1_QKEY),
        ..Default::default()
    };
    net.b.h.post_recv(&mut gsi, &[net.b.dst.sg(0, 40 + 256)]);
    let drops = net.b.h.stats().rx_drops;
    net.a.h.send(&mut net.a.ud, &forged);
    let (sc, _) = net.complete(false);
    assert_eq!(
        sc[0].error(),
        None,
        "UD is unreliable: the sender sees success"
    );
    net.run(|_| false);
    assert!(
        net.b.h.poll_cq(&mut net.b.rcq).is_empty(),
        "the forged MAD reached QP1"
    );
    assert_eq!(
        net.b.h.stats().rx_drops,
        drops + 1,
        "Q_Key mismatch counted"
    );
    // The privileged QP's identical WQE is delivered to QP1 (the receive posted above).
    net.a.h.send(&mut kud, &forged);
    let (sc, rc) = net.complete(true);
    assert_eq!(sc[0].error(), None);
    assert_eq!((rc[0].error(), rc[0].len(), rc[0].qp_id()), (None, 296, 1));
    assert_eq!(rc[0].qw[2] as u32 & 0xff_ffff, KQPN, "source QP");
    assert_eq!(net.b.h.read(net.b.dst.gpa + 40, 256), mad);
    // The user QP's controlled-key WQE to B's UD QP (Q_Key QKEY, the user QP's own): the
    // wire carries QKEY, so it is delivered.
    net.b.h.write(net.b.dst.gpa, &[0; 296]);
    net.b
        .h
        .post_recv(&mut net.b.ud, &[net.b.dst.sg(0, 40 + 256)]);
    let to_ud = Wr {
        qw2: (u64::from(UDQPN) << 32) | u64::from(QP1_QKEY),
        ..forged
    };
    net.a.h.send(&mut net.a.ud, &to_ud);
    let (sc, rc) = net.complete(true);
    assert_eq!(sc[0].error(), None);
    assert_eq!(
        (rc[0].error(), rc[0].len(), rc[0].qp_id()),
        (None, 296, UDQPN)
    );
    assert_eq!(net.b.h.read(net.b.dst.gpa + 40, 256), mad);
    assert_eq!(net.b.h.stats().rx_drops, drops + 1);
}

/// Several QP pairs at once, each running a random sequence of operations of random sizes
/// and MTUs, over a link with 5% loss plus duplication, reordering and delay: every
/// operation completes in order with the right data, and the QPs never disturb each other.
#[test]
fn several_qps_with_random_traffic_under_heavy_loss() {
    let heavy =
        FaultConfig::parse("drop=0.05,dup=0.03,reorder=0.03,delay=0.03,delay-ms=3").unwrap();
    let mut net = Net::new(4 << 20, Path::default());
    net.faults(heavy, 99);
    const PAIRS: u32 = 4;
    const SLICE: u64 = 1 << 20;
    let mut qps: Vec<(QpH, QpH)> = Vec::new();
    let mut rng = Rng(7);
    for k in 0..PAIRS {
        let id = 10 + k;
        let qa = net.a.h.create_qp(id, QP_TYPE_RC, 1, 1, 2, 256, 32, 2);
        let qb = net.b.h.create_qp(id, QP_TYPE_RC, 1, 1, 2, 256, 32, 2);
        let p = Path {
            mtu: 1 + rng.below(5) as u8,
            ..Path::default()
        };
        let (sa, sb) = (rng.below(1 << 24) as u32, rng.below(1 << 24) as u32);
        net.a.connect_qp(id, id, 2, p, sa, sb);
        net.b.connect_qp(id, id, 1, p, sb, sa);
        qps.push((qa, qb));
    }
    for round in 0..12u32 {
        let mut expect = Vec::new();
        for (k, (qa, qb)) in qps.iter_mut().enumerate() {
            let op = ALL_OPS[rng.below(5) as usize];
            let max = if rng.below(4) == 0 { SLICE } else { 5000 };
            let len = 1 + rng.below(max) as u32;
            let off = k as u64 * SLICE;
            let seed = (round * 16 + k as u32) as u8;
            let data = pattern(len as usize, seed);
            let (from, to) = if op == Op::Read {
                (&net.b, &net.a)
            } else {
                (&net.a, &net.b)
            };
            from.h.write(from.src.gpa + off, &data);
            to.h.write(to.dst.gpa + off, &vec![0u8; len as usize]);
            let recv = matches!(op, Op::Send | Op::SendImm | Op::WriteImm);
            if recv {
                let sg = net.b.dst.sg(off, len);
                net.b.h.post_recv(qb, &[sg]);
            }
            let imm = matches!(op, Op::SendImm | Op::WriteImm).then_some(round);
            let wr = match op {
                Op::Send | Op::SendImm => Wr {
                    opcode: sq_op::SEND,
                    sges: vec![net.a.src.sg(off, len)],
                    imm,
                    ..Default::default()
                },
                Op::Write | Op::WriteImm => Wr {
                    opcode: sq_op::RDMA_WRITE,
                    sges: vec![net.a.src.sg(off, len)],
                    imm,
                    hdr_low: net.b.dst.stag,
                    qw2: net.b.dst.va + off,
                    ..Default::default()
                },
                Op::Read => Wr {
                    opcode: sq_op::RDMA_READ,
                    sges: vec![net.a.dst.sg(off, len)],
                    hdr_low: net.b.src.stag,
                    qw2: net.b.src.va + off,
                    ..Default::default()
                },
            };
            net.a.h.send(
                qa,
                &Wr {
                    signaled: true,
                    ..wr
                },
            );
            expect.push((op, off, data, recv));
        }
        let want_recv = expect.iter().filter(|e| e.3).count();
        let (mut sc, mut rc) = (Vec::new(), Vec::new());
        assert!(
            net.run(|n| {
                sc.extend(n.a.h.poll_cq(&mut n.a.scq));
                rc.extend(n.b.h.poll_cq(&mut n.b.rcq));
                sc.len() == PAIRS as usize && rc.len() == want_recv
            }),
            "round {round}: {sc:?} {rc:?}"
        );
        assert!(
            sc.iter().chain(&rc).all(|c| c.error().is_none()),
            "round {round}: {sc:?} {rc:?}"
        );
        for (op, off, data, _) in expect {
            let (nic, dst) = if op == Op::Read {
                (&net.a, net.a.dst)
            } else {
                (&net.b, net.b.dst)
            };
            assert!(
                nic.h.read(dst.gpa + off, data.len()) == data,
                "round {round} {op:?} at {off:#x}"
            );
        }
    }
    let c = net.to_b.as_ref().unwrap().counters();
    assert!(c.dropped > 50, "{c:?}");
}

/// Counters: every frame is a transmitted packet; a delivered message counts once with its
/// length.
#[test]
fn counters_count_packets_and_messages() {
    let mut net = Net::new(1 << 20, Path::default());
    let (a0, b0) = (net.a.h.stats(), net.b.h.stats());
    transfer(&mut net, Op::Write, 5000, 1);
    transfer(&mut net, Op::WriteImm, 5000, 2);
    transfer(&mut net, Op::Send, 5000, 3);
    let (a1, b1) = (net.a.h.stats(), net.b.h.stats());
    // 1024-byte MTU: 5 packets per message; one ACK each.
    assert_eq!(a1.tx_packets - a0.tx_packets, 15);
    assert_eq!(b1.tx_packets - b0.tx_packets, 3);
    assert_eq!(a1.tx_bytes - a0.tx_bytes, 15_000);
    assert_eq!(b1.rx_packets - b0.rx_packets, 3);
    assert_eq!(b1.rx_bytes - b0.rx_bytes, 15_000);
    assert_eq!(net.frames, 18);
}

/// Port counters (QUERY_COUNTERS): packets and IP octets per direction and IP version,
/// requests by kind; then a WRITE whose second packet is lost: the responder counts the
/// packets after the gap as out of sequence (and drops them), the requester the sequence NAK
/// and the packets it sends again.
#[test]
fn port_counters_follow_traffic_and_loss() {
    let mut net = Net::new(1 << 20, Path::default());
    let (a0, b0) = (net.a.h.counters(), net.b.h.counters());
    transfer(&mut net, Op::Write, 5000, 1);
    transfer(&mut net, Op::Send, 100, 2);
    transfer(&mut net, Op::Read, 3000, 3);
    let (a1, b1) = (net.a.h.counters(), net.b.h.counters());
    let d = |x: u64, y: u64| x - y;
    // 1024-byte MTU: 5 WRITE packets, a SEND and a READ request; two ACKs and 3 responses.
    assert_eq!(d(a1.ip4_tx_pkts, a0.ip4_tx_pkts), 7);
    assert_eq!(d(b1.ip4_rx_pkts, b0.ip4_rx_pkts), 7);
    assert_eq!(d(b1.ip4_tx_pkts, b0.ip4_tx_pkts), 5);
    assert_eq!(d(a1.ip4_rx_pkts, a0.ip4_rx_pkts), 5);
    assert_eq!(d(a1.tx_udp, a0.tx_udp), 7);
    assert_eq!(d(b1.rx_udp, b0.rx_udp), 7);
    let sent = d(a1.ip4_tx_octets, a0.ip4_tx_octets);
    assert_eq!(sent, d(b1.ip4_rx_octets, b0.ip4_rx_octets));
    // Payload, and per packet IPv4 (20) + UDP (8) + BTH (12) + ICRC (4); RETH (16) twice.
    assert_eq!(sent, 5100 + 7 * 44 + 2 * 16);
    assert_eq!(
        (
            d(a1.tx_writes, a0.tx_writes),
            d(a1.tx_sends, a0.tx_sends),
            d(a1.tx_reads, a0.tx_reads)
        ),
        (1, 1, 1)
    );
    assert_eq!(
        (
            d(b1.rx_writes, b0.rx_writes),
            d(b1.rx_sends, b0.rx_sends),
            d(b1.rx_reads, b0.rx_reads)
        ),
        (1, 1, 1)
    );
    for c in [a1, b1] {
        assert_eq!(
            (
                c.ip6_tx_pkts,
                c.ip6_rx_pkts,
                c.ip4_rx_discards,
                c.icrc_errors
            ),
            (0, 0, 0, 0)
        );
        assert_eq!(
            (c.retransmits, c.local_ack_timeouts, c.out_of_sequence),
            (0, 0, 0)
        );
    }

    let wr = Wr {
        opcode: sq_op::RDMA_WRITE,
        signaled: true,
        sges: vec![net.a.src.sg(0, 5000)],
        hdr_low: net.b.dst.stag,
        qw2: net.b.dst.va,
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &wr);
    let frames = net.a.h.dev().take_tx();
    assert_eq!(frames.len(), 5);
    for (i, f) in frames.iter().enumerate() {
        if i != 1 {
            net.b.h.dev().rx_frame(f);
        }
    }
    let (sc, _) = net.complete(false);
    assert_eq!(sc[0].error(), None);
    let (a2, b2) = (net.a.h.counters(), net.b.h.counters());
    assert_eq!(d(b2.out_of_sequence, b1.out_of_sequence), 3);
    assert_eq!(d(b2.ip4_rx_discards, b1.ip4_rx_discards), 3);
    assert_eq!(d(a2.seq_naks_rcvd, a1.seq_naks_rcvd), 1);
    assert_eq!(d(a2.retransmits, a1.retransmits), 4, "packets 2 to 5 again");
    assert_eq!(
        d(a2.tx_writes, a1.tx_writes),
        1,
        "the first packet went once"
    );
    // A frame with a broken ICRC and one that is not RoCEv2 at all.
    let mut bad = frames[0].clone();
    let n = bad.len();
    bad[n - 1] ^= 0xff;
    net.b.h.dev().rx_frame(&bad);
    net.b.h.dev().rx_frame(&bad[..30]);
    let b3 = net.b.h.counters();
    assert_eq!((b3.icrc_errors, b3.header_errors), (1, 1));
}

/// The retransmission timer runs from the last request packet sent. Two WRITEs leave a
/// long pause apart (as when the NIC process is not scheduled halfway through a window): at
/// the first one's timeout nothing is sent again, since the second restarted the timer; at
/// the second one's, with still no answer, both are, from the oldest unacknowledged PSN.
#[test]
fn the_retransmission_timer_restarts_with_every_request_sent() {
    let mut net = Net::new(1 << 20, Path::default());
    let t = crate::rdma::transport::ack_timeout_us(Path::default().timeout).unwrap();
    let c0 = net.a.h.counters();
    let d = |x: u64, y: u64| x - y;
    let write = |net: &Net, off: u64| Wr {
        opcode: sq_op::RDMA_WRITE,
        signaled: true,
        sges: vec![net.a.src.sg(off, 100)],
        hdr_low: net.b.dst.stag,
        qw2: net.b.dst.va + off,
        ..Default::default()
    };
    let wr = write(&net, 0);
    net.a.h.send(&mut net.a.qp, &wr);
    assert_eq!(net.a.h.dev().take_tx().len(), 1);
    let first_sent = net.now();
    net.clock.store(first_sent + t - 1000, Ordering::Relaxed);
    net.a.h.dev().tick();
    let wr = write(&net, 4096);
    net.a.h.send(&mut net.a.qp, &wr);
    assert_eq!(net.a.h.dev().take_tx().len(), 1);
    let second_sent = net.now();
    net.clock.store(first_sent + t + 1000, Ordering::Relaxed);
    net.a.h.dev().tick();
    assert!(
        net.a.h.dev().take_tx().is_empty(),
        "sent again at the first packet's timeout, the second one sent {} us before",
        net.now() - second_sent
    );
    net.clock.store(second_sent + t + 1, Ordering::Relaxed);
    net.a.h.dev().tick();
    let again = net.a.h.dev().take_tx_unsealed();
    assert_eq!(again.len(), 2, "both sent again at the second's timeout");
    net.carry(again, true);
    let mut sc = Vec::new();
    while sc.len() < 2 {
        let (got, _) = net.complete(false);
        sc.extend(got);
    }
    assert!(sc.iter().all(|c| c.error().is_none()));
    let c1 = net.a.h.counters();
    assert_eq!(
        (
            d(c1.local_ack_timeouts, c0.local_ack_timeouts),
            d(c1.retransmits, c0.retransmits)
        ),
        (1, 2)
    );
}

/// The host stops the NIC process in the middle of a step, longer than the ACK timeout
/// (seen: 93 ms on a loaded make check host; the engines and the fabric share the process):
/// the retransmission timer the step armed, from the clock read at the step's start, must
/// not expire the moment the process runs again, before the peer could answer. The NIC's
/// timers count its running time: the packet goes again one full timeout after the stall.
#[test]
fn a_stall_of_the_nic_inside_a_step_does_not_expire_the_timer_it_armed() {
    use crate::device::{TxSink, STALL_US};
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;
    let mut net = Net::new(1 << 20, Path::default());
    let t = crate::rdma::transport::ack_timeout_us(Path::default().timeout).unwrap();
    let stall = t + 25_000;
    assert!(stall >= STALL_US);
    let sent = Arc::new(Mutex::new(Vec::new()));
    let stall_once = Arc::new(AtomicBool::new(true));
    {
        let (clock, sent, once) = (
            Arc::clone(&net.clock),
            Arc::clone(&sent),
            Arc::clone(&stall_once),
        );
        // The host stops the process while the step hands its frames to the fabric.
        net.a
            .h
            .dev()
            .set_sink(TxSink(Box::new(move |frames: Vec<Vec<u8>>| {
                if once.swap(false, Ordering::SeqCst) {
                    clock.fetch_add(stall, Ordering::SeqCst);
                }
                sent.lock().unwrap().extend(frames);
            })));
    }
    let count = |sent: &Arc<Mutex<Vec<Vec<u8>>>>| sent.lock().unwrap().len();
    let c0 = net.a.h.counters();
    let wr = Wr {
        opcode: sq_op::RDMA_WRITE,
        signaled: true,
        sges: vec![net.a.src.sg(0, 100)],
        hdr_low: net.b.dst.stag,
        qw2: net.b.dst.va,
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &wr);
    assert_eq!(count(&sent), 1);
    assert_eq!(
        net.a.h.dev().stalls(),
        1,
        "the step that stalled is counted"
    );
    let resumed = net.now();
    net.a.h.dev().tick();
    assert_eq!(
        count(&sent),
        1,
        "sent again as soon as the process ran after the stall"
    );
    net.clock.store(resumed + t - 1000, Ordering::Relaxed);
    net.a.h.dev().tick();
    assert_eq!(
        count(&sent),
        1,
        "sent again before a full timeout of the NIC's own time"
    );
    net.clock.store(resumed + t + 1000, Ordering::Relaxed);
    net.a.h.dev().tick();
    assert_eq!(
        count(&sent),
        2,
        "a timeout of the NIC's time after the stall: sent again"
    );
    let c1 = net.a.h.counters();
    assert_eq!(c1.local_ack_timeouts - c0.local_ack_timeouts, 1);
    assert_eq!(net.a.h.dev().stalls(), 1, "no other step stalled");
}

/// A receive whose buffer the responder may not write: the requester gets REM_OP, the
/// responder a protection error on its receive and QP_LOCAL_ACCESS.
#[test]
fn receive_buffer_fault_is_a_remote_operational_error() {
    let mut net = Net::new(1 << 20, Path::default());
    let bad = Sg {
        addr: net.b.dst.va,
        len: 4000,
        lkey: net.b.dst.stag ^ 0x80,
    };
    net.b.h.post_recv(&mut net.b.qp, &[bad]);
    let wr = Wr {
        opcode: sq_op::SEND,
        signaled: true,
        sges: vec![net.a.src.sg(0, 3000)],
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &wr);
    let (sc, rc) = net.complete(true);
    assert_eq!(sc[0].error(), Some((cqe::MAJERR_FLUSH, flush::REM_OP)));
    assert_eq!(rc[0].error(), Some((cqe::MAJERR_FLUSH, flush::PROT)));
    assert!(aeq_codes(&mut net.b).contains(&ae::QP_LOCAL_ACCESS));
    assert!(aeq_codes(&mut net.a).contains(&ae::QP_REMOTE_ERROR));
}

/// A SEND MIDDLE with no message in progress, at the expected PSN: NAK invalid request,
/// QP_INVALID_REQUEST, ERR. A packet ahead of the expected PSN gets one sequence NAK.
#[test]
fn out_of_sequence_requests_get_naks() {
    use crate::wire::aeth::{NakCode, Syndrome};
    let mut net = Net::new(1 << 20, Path::default());
    let epsn = net.b.h.query_qp(QPN).attrs.rq_psn;
    // A real packet from A to B, as a template.
    let sg = net.b.dst.sg(0, 64);
    net.b.h.post_recv(&mut net.b.qp, &[sg]);
    let wr = Wr {
        opcode: sq_op::SEND,
        signaled: true,
        sges: vec![net.a.src.sg(0, 64)],
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &wr);
    let template = net.a.h.dev().take_tx().remove(0);
    let mut h = crate::wire::parse(&template).unwrap().headers;
    let nak_of = |frames: Vec<Vec<u8>>| {
        frames
            .iter()
            .filter_map(|f| crate::wire::parse(f).ok())
            .filter_map(|p| p.headers.ext.aeth.map(|a| (p.headers.bth.psn, a.syndrome)))
            .collect::<Vec<_>>()
    };
    // Ahead of the expected PSN (twice): one PSN sequence error NAK naming the expected one.
    for k in [3, 4] {
        h.bth.psn = (epsn + k) & 0xff_ffff;
        let f = crate::wire::build(&h, &[1; 64]).unwrap();
        net.b.h.dev().rx_frame(&f);
    }
    assert_eq!(
        nak_of(net.b.h.dev().take_tx()),
        [(epsn, Syndrome::Nak(NakCode::PsnSequenceError))]
    );
    // MIDDLE without FIRST at the expected PSN.
    h.bth.psn = epsn;
    h.bth.opcode = crate::wire::opcode::RC_SEND_MIDDLE;
    let f = crate::wire::build(&h, &[2; 1024]).unwrap();
    net.b.h.dev().rx_frame(&f);
    assert_eq!(
        nak_of(net.b.h.dev().take_tx()),
        [(epsn, Syndrome::Nak(NakCode::InvalidRequest))]
    );
    assert!(aeq_codes(&mut net.b).contains(&ae::QP_INVALID_REQUEST));
    assert_eq!(net.b.h.query_qp(QPN).attrs.state, qp_state::ERR);
}

/// Duplicates: a SEND seen again is re-acknowledged (not delivered twice); a READ request
/// seen again is answered again.
#[test]
fn duplicates_are_reacknowledged_and_reads_reexecuted() {
    use crate::wire::aeth::Syndrome;
    use crate::wire::opcode as op;
    let mut net = Net::new(1 << 20, Path::default());
    let sg = net.b.dst.sg(0, 64);
    net.b.h.post_recv(&mut net.b.qp, &[sg]);
    net.b.h.post_recv(&mut net.b.qp, &[sg]);
    let send = Wr {
        opcode: sq_op::SEND,
        signaled: true,
        sges: vec![net.a.src.sg(0, 64)],
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &send);
    let send_frame = net.a.h.dev().take_tx().remove(0);
    let read = Wr {
        opcode: sq_op::RDMA_READ,
        signaled: true,
        sges: vec![net.a.dst.sg(0, 3000)],
        hdr_low: net.b.src.stag,
        qw2: net.b.src.va,
        ..Default::default()
    };
    net.a.h.send(&mut net.a.qp, &read);
    let read_frame = net.a.h.dev().take_tx().remove(0);
    let out = |net: &mut Net, f: &[u8]| {
        net.b.h.dev().rx_frame(f);
        rc_frames(&net.b.h.dev().take_tx())
    };
    let psn = crate::wire::parse(&send_frame).unwrap().headers.bth.psn;
    let ack = Some(Syndrome::Ack { credits: 0x1f });
    assert_eq!(out(&mut net, &send_frame), [(op::RC_ACK, psn, ack)]);
    assert_eq!(
        out(&mut net, &send_frame),
        [(op::RC_ACK, psn, ack)],
        "re-ACK"
    );
    assert_eq!(net.b.h.poll_cq(&mut net.b.rcq).len(), 1, "delivered once");
    let first = (psn + 1) & 0xff_ffff;
    let responses = [
        (op::RC_READ_RESPONSE_FIRST, first, ack),
        (op::RC_READ_RESPONSE_MIDDLE, first + 1, None),
        (op::RC_READ_RESPONSE_LAST, first + 2, ack),
    ];
    assert_eq!(out(&mut net, &read_frame), responses);
    assert_eq!(out(&mut net, &read_frame), responses, "READ executed again");
    assert_eq!(net.b.h.query_qp(QPN).attrs.rq_psn, (first + 3) & 0xff_ffff);
}

/// Privileged RC QPs (4 on both NICs) with bus-address SGEs through `LOCAL_DMA_STAG`:
/// multi-packet SEND, WRITE and READ over the wire; then STag 0 as an rkey is refused.
#[test]
fn privileged_qps_use_local_dma_stag_over_the_wire() {
    const PQP: u32 = 4;
    let mut net = Net::new(1 << 20, Path::default());
    let mut qa = net
        .a
        .h
        .create_qp_flags(QP_FLAG_PRIVILEGED, PQP, QP_TYPE_RC, 1, 1, 2, 256, 64, 2);
    let mut qb = net
        .b
        .h
        .create_qp_flags(QP_FLAG_PRIVILEGED, PQP, QP_TYPE_RC, 1, 1, 2, 256, 64, 2);
    net.a.connect_qp(PQP, PQP, 2, Path::default(), 0x10, 0x20);
    net.b.connect_qp(PQP, PQP, 1, Path::default(), 0x20, 0x10);
    let dma = |addr, len| Sg {
        addr,
        len,
        lkey: LOCAL_DMA_STAG,
    };
    let len = 10_000u32;
    let data = pattern(len as usize, 0x3c);
    let a_buf = net.a.h.alloc(u64::from(len), 4096);
    let b_buf = net.b.h.alloc(u64::from(len), 4096);
    net.a.h.write(a_buf, &data);
    // SEND: two bus-address SGEs into two bus-address receive SGEs.
    net.b
        .h
        .post_recv(&mut qb, &[dma(b_buf + 5000, 5000), dma(b_buf, 5000)]);
    net.a.h.send(
        &mut qa,
        &Wr {
            opcode: sq_op::SEND,
            signaled: true,
            sges: vec![dma(a_buf, 3000), dma(a_buf + 3000, len - 3000)],
            ..Default::default()
        },
    );
    let (sc, rc) = net.complete(true);
    assert_eq!(sc[0].error(), None);
    assert_eq!(
        (rc[0].error(), rc[0].len(), rc[0].qp_id()),
        (None, len, PQP)
    );
    assert_eq!(net.b.h.read(b_buf + 5000, 5000), data[..5000]);
    assert_eq!(net.b.h.read(b_buf, 5000), data[5000..]);
    // WRITE from a bus address into B's MR.
    net.a.h.send(
        &mut qa,
        &Wr {
            opcode: sq_op::RDMA_WRITE,
            signaled: true,
            sges: vec![dma(a_buf, len)],
            hdr_low: net.b.dst.stag,
            qw2: net.b.dst.va,
            ..Default::default()
        },
    );
    let (sc, _) = net.complete(false);
    assert_eq!(sc[0].error(), None);
    assert_eq!(net.b.h.read(net.b.dst.gpa, len as usize), data);
    // READ it back into a bus-address buffer on A.
    let back = net.a.h.alloc(u64::from(len), 4096);
    net.a.h.send(
        &mut qa,
        &Wr {
            opcode: sq_op::RDMA_READ,
            signaled: true,
            sges: vec![dma(back, len)],
            hdr_low: net.b.dst.stag,
            qw2: net.b.dst.va,
            ..Default::default()
        },
    );
    let (sc, _) = net.complete(false);
    assert_eq!((sc[0].error(), sc[0].len()), (None, len));
    assert_eq!(net.a.h.read(back, len as usize), data);
    // STag 0 as an rkey names no MR on the responder, privileged or not.
    net.a.h.send(
        &mut qa,
        &Wr {
            opcode: sq_op::RDMA_WRITE,
            signaled: true,
            sges: vec![dma(a_buf, 64)],
            hdr_low: LOCAL_DMA_STAG,
            qw2: b_buf,
            ..Default::default()
        },
    );
    let (sc, _) = net.complete(false);
    assert_eq!(sc[0].error(), Some((cqe::MAJERR_FLUSH, flush::REM_ACCESS)));
    assert!(aeq_codes(&mut net.b).contains(&ae::QP_REMOTE_ACCESS));
    assert_eq!(
        net.b.h.read(b_buf, 64),
        data[5000..5064],
        "B's memory untouched"
    );
    assert!(net.a.h.guards_intact() && net.b.h.guards_intact());
}

/// A privileged QP's bus-address SGE outside guest memory, on the wire paths: the
/// requester's gather (PROT, QP_LOCAL_ACCESS, nothing sent) and the responder's scatter
/// (PROT on B's RQ, remote operational error on A).
#[test]
fn privileged_local_dma_stag_outside_guest_memory_over_the_wire() {
    const PQP: u32 = 4;
    for requester_side in [true, false] {
        let mut net = Net::new(1 << 20, Path::default());
        let mut qa =
            net.a
                .h
                .create_qp_flags(QP_FLAG_PRIVILEGED, PQP, QP_TYPE_RC, 1, 1, 2, 256, 64, 2);
        let mut qb =
            net.b
                .h
                .create_qp_flags(QP_FLAG_PRIVILEGED, PQP, QP_TYPE_RC, 1, 1, 2, 256, 64, 2);
        net.a.connect_qp(PQP, PQP, 2, Path::default(), 0x10, 0x20);
        net.b.connect_qp(PQP, PQP, 1, Path::default(), 0x20, 0x10);
        let outside = RAM_BASE + net.b.h.ram_size - 16;
        let bad = Sg {
            addr: outside,
            len: 64,
            lkey: LOCAL_DMA_STAG,
        };
        let good = net.a.src.sg(0, 64);
        let (send_sg, recv_sg) = if requester_side {
            (bad, net.b.dst.sg(0, 64))
        } else {
            (good, bad)
        };
        net.b.h.post_recv(&mut qb, &[recv_sg]);
        net.a.h.send(
            &mut qa,
            &Wr {
                opcode: sq_op::SEND,
                signaled: true,
                sges: vec![send_sg],
                ..Default::default()
            },
        );
        let (sc, rc) = net.complete(!requester_side);
        if requester_side {
            assert_eq!(sc[0].error(), Some((cqe::MAJERR_FLUSH, flush::PROT)));
            assert!(aeq_codes(&mut net.a).contains(&ae::QP_LOCAL_ACCESS));
        } else {
            assert_eq!(rc[0].error(), Some((cqe::MAJERR_FLUSH, flush::PROT)));
            assert!(aeq_codes(&mut net.b).contains(&ae::QP_LOCAL_ACCESS));
            assert_eq!(sc[0].error(), Some((cqe::MAJERR_FLUSH, flush::REM_OP)));
        }
        assert!(net.a.h.guards_intact() && net.b.h.guards_intact());
    }
}

/// The control socket's `link` on a running hub (as `--control` drives it): NIC B's engine
/// port goes down in the middle of a 4 MiB RDMA WRITE. A short outage is recovered by RC's
/// retransmission and the data arrives intact; an outage longer than the retries last fails
/// the next WRITE with RETRY_EXC. `stats` shows the frames the down link swallowed.
#[test]
fn control_link_down_and_up_on_a_running_hub() {
    use crate::fabric::control::{self, Apply, Command, PortRef};
    use crate::fabric::hub::Faults;
    use std::time::Duration;
    let Running {
        dir,
        hub,
        mut a,
        mut b,
        engines,
        ..
    } = Running::start("control", Faults::default());
    // 2^14 * 4.096 us = 67 ms per try, 7 retries: about half a second in all.
    let p = Path {
        mtu: 5,
        timeout: 14,
        ..Path::default()
    };
    a.connect(2, p, 7, 9);
    b.connect(1, p, 9, 7);
    let ctl = hub.control.clone();
    let link = |up| {
        ctl.apply(Command::Link {
            ports: vec![PortRef::Nic(1)],
            up,
        })
    };
    let len = 4u32 << 20;
    let data = pattern(len as usize, 21);
    a.h.write(a.src.gpa, &data);
    let write = Wr {
        opcode: sq_op::RDMA_WRITE,
        signaled: true,
        sges: vec![a.src.sg(0, len)],
        hdr_low: b.dst.stag,
        qw2: b.dst.va,
        ..Default::default()
    };
    // Short outage: down before the WRITE starts, up 150 ms later.
    assert_eq!(link(false), Ok(Vec::new()));
    a.h.send(&mut a.qp, &write);
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(link(true), Ok(Vec::new()));
    let c = wait_cqes(&a.h, &mut a.scq, 1);
    assert!(c.iter().all(|c| c.error().is_none()), "{c:?}");
    assert!(b.h.read(b.dst.gpa, len as usize) == data);
    let stats = ctl.apply(Command::Stats).unwrap();
    let nic1 = stats
        .iter()
        .find(|l| l.starts_with("port 1 nic:1 up"))
        .unwrap();
    assert!(!nic1.contains(" down_dropped=0 "), "{nic1}");
    // Bad requests are refused by the hub too.
    assert!(ctl
        .apply(Command::Link {
            ports: vec![PortRef::Nic(2)],
            up: false
        })
        .is_err());
    assert!(ctl
        .apply(Command::Fault {
            port: PortRef::Lan(1),
            fault: None
        })
        .is_err());
    assert!(control::parse("link nic:1 sideways").is_err());
    // Long outage: every retry is lost.
    assert_eq!(link(false), Ok(Vec::new()));
    a.h.send(&mut a.qp, &write);
    let c = wait_cqes(&a.h, &mut a.scq, 1);
    assert_eq!(c[0].error(), Some((cqe::MAJERR_FLUSH, flush::RETRY_EXC)));
    assert_eq!(link(true), Ok(Vec::new()));
    drop(engines);
    drop(hub);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The host's test-only WRITE corruption knob (`rdma/sabotage.rs`) on the responder of the
/// wire path: off, every operation is intact; armed at offset 2100, exactly that byte of each
/// WRITE (with or without immediate; in the third 1024-byte packet) is flipped, SEND and
/// READ stay intact, and a WRITE too short to hold the byte too; disarmed, all is well again.
#[test]
fn sabotage_knob_flips_one_byte_of_each_write_the_responder_places() {
    use crate::rdma::sabotage::FLIP;
    let p = Path {
        mtu: 3,
        ..Path::default()
    };
    let mut net = Net::new(64 << 10, p);
    let knob = net.b.h.dev().engine().sabotage();
    for op in ALL_OPS {
        transfer(&mut net, op, 5000, 1);
    }
    assert_eq!(knob.hits(), 0, "off by default");
    knob.set(Some(2100));
    for (i, op) in [Op::Write, Op::WriteImm].into_iter().enumerate() {
        let (data, got) = transfer_data(&mut net, op, 5000, 10 + i as u8);
        let diff: Vec<usize> = (0..data.len()).filter(|&j| got[j] != data[j]).collect();
        assert_eq!(diff, vec![2100], "{op:?}");
        assert_eq!(got[2100], data[2100] ^ FLIP);
    }
    assert_eq!(knob.hits(), 2);
    transfer(&mut net, Op::Send, 5000, 20);
    transfer(&mut net, Op::SendImm, 5000, 21);
    transfer(&mut net, Op::Read, 5000, 22);
    transfer(&mut net, Op::Write, 2100, 23);
    assert_eq!(
        knob.hits(),
        2,
        "only WRITEs that hold byte 2100 are touched"
    );
    knob.set(None);
    for op in ALL_OPS {
        transfer(&mut net, op, 5000, 30);
    }
    assert_eq!(knob.hits(), 2);
}

/// The NIC-level figure of `make bench`: two NICs with their engine threads on a running
/// fabric (no VMs, no guest CPU), one RC QP streaming 64 KiB RDMA WRITEs with 64 in flight,
/// as ib_write_bw does, for each path MTU, with the capture on (128 bytes a frame, as the VM
/// harness keeps) and off. The test thread plays the guest (posts WQEs, polls the CQ); its
/// doorbells reach the NIC on a thread of their own, as the vfio-user server's do, so the
/// NIC's work never runs on the "guest's" thread.
/// Prints a `fabric-bench,` CSV row (bench/report.py's columns) per run: FERRDMA_FABRIC_BENCH_MIB
/// (default 1024) MiB each, FERRDMA_FABRIC_BENCH_REPS (default 1) rounds. Judges only that
/// every WRITE completed and the bytes arrived.
#[test]
#[ignore]
fn fabric_bench_write_stream() {
    // Frame buffers kept as the NIC keeps them (test builds poison them otherwise).
    crate::wire::frame_pool::no_poison();
    use crate::fabric::hub::Faults;
    let total = env_or("FERRDMA_FABRIC_BENCH_MIB", 1024u64) << 20;
    let reps = env_or("FERRDMA_FABRIC_BENCH_REPS", 1u64);
    const MSG: u32 = 64 << 10;
    const DEPTH: usize = 64;
    for (rep, mtu, bytes) in (1..=reps).flat_map(|r| [(r, 3u8, 1024), (r, 5, 4096)]) {
        for pcap in [true, false] {
            let tag = format!("bench-{mtu}-{pcap}");
            let snaplen = pcap.then_some(128);
            let Running {
                dir,
                hub,
                mut a,
                mut b,
                engines,
                ..
            } = Running::start_with(&tag, Faults::default(), snaplen);
            let p = Path {
                mtu,
                ..Path::default()
            };
            a.connect(2, p, 7, 9);
            b.connect(1, p, 9, 7);
            let slots = a.src.len / u64::from(MSG);
            let data = pattern(a.src.len as usize, mtu);
            a.h.write(a.src.gpa, &data);
            let msgs = total / u64::from(MSG);
            let (ring, rings) = std::sync::mpsc::channel::<()>();
            let server = {
                let (dev, page, qpn) = (a.h.shared.clone(), a.qp.db_page, a.qp.id);
                std::thread::spawn(move || {
                    while rings.recv().is_ok() {
                        Host::doorbell_of(&dev, page, DB_SQ_OFFSET, qpn);
                    }
                })
            };
            let t0 = std::time::Instant::now();
            let (mut posted, mut done, mut inflight) = (0u64, 0u64, 0usize);
            while done < msgs {
                while inflight < DEPTH && posted < msgs {
                    let off = (posted % slots) * u64::from(MSG);
                    let wr = Wr {
                        opcode: sq_op::RDMA_WRITE,
                        signaled: true,
                        sges: vec![a.src.sg(off, MSG)],
                        hdr_low: b.dst.stag,
                        qw2: b.dst.va + off,
                        ..Default::default()
                    };
                    a.h.post_send(&mut a.qp, &wr);
                    ring.send(()).unwrap();
                    posted += 1;
                    inflight += 1;
                }
                let c = a.h.poll_cq(&mut a.scq);
                assert!(c.iter().all(|c| c.error().is_none()), "{c:?}");
                done += c.len() as u64;
                inflight -= c.len();
                if c.is_empty() {
                    std::thread::yield_now();
                }
            }
            let secs = t0.elapsed().as_secs_f64();
            drop(ring);
            server.join().unwrap();
            drop(engines);
            assert!(b.h.read(b.dst.gpa, a.src.len as usize) == data);
            println!(
                "fabric-bench,nic-level,ferrdma,fabric_write_x{DEPTH}_mtu{bytes}_pcap_{},{MSG},{rep},MiBps,{:.1}",
                if pcap { "on" } else { "off" },
                (total >> 20) as f64 / secs,
            );
            drop(hub);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// The host's price of a thread wake-up, beside `make bench`'s memcpy: two threads hand a
/// token back and forth through a mutex and condition variable (as a NIC's frame queue wakes
/// its engine), each sleeping until woken. A two-VM latency pays a few such wake-ups per
/// message (the vfio-user server thread after a doorbell, the receiving engine), and hosts
/// differ: 40-45 us a round trip on session 28's machine (a virtualized host), against
/// 0.1 us for two threads spinning. Prints a `fabric-bench,host,` row: the median of
/// FERRDMA_FABRIC_BENCH_ITERS (default 20000) round trips, in microseconds.
#[test]
#[ignore]
fn fabric_bench_host_wakeup_round_trip() {
    use std::sync::{Condvar, Mutex};
    let iters = env_or("FERRDMA_FABRIC_BENCH_ITERS", 20_000u64);
    let reps = env_or("FERRDMA_FABRIC_BENCH_REPS", 1u64);
    for rep in 1..=reps {
        // The token's holder: false for this thread, true for the peer.
        let turn = Arc::new((Mutex::new(false), Condvar::new()));
        let peer = {
            let turn = Arc::clone(&turn);
            std::thread::spawn(move || {
                let (m, cv) = &*turn;
                for _ in 0..iters {
                    let mut t = m.lock().unwrap();
                    while !*t {
                        t = cv.wait(t).unwrap();
                    }
                    *t = false;
                    cv.notify_one();
                }
            })
        };
        let (m, cv) = &*turn;
        let mut rtt_us = Vec::with_capacity(iters as usize);
        for _ in 0..iters {
            let t0 = std::time::Instant::now();
            let mut t = m.lock().unwrap();
            *t = true;
            cv.notify_one();
            while *t {
                t = cv.wait(t).unwrap();
            }
            drop(t);
            rtt_us.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        peer.join().unwrap();
        rtt_us.sort_by(f64::total_cmp);
        let median = rtt_us[rtt_us.len() / 2];
        println!("fabric-bench,host,host,wakeup_round_trip,0,{rep},median_us,{median:.1}");
    }
}

/// The NIC-level latency of `make bench`: two NICs with their engine threads on a running
/// fabric (no VMs, no guest CPU), a 2-byte RC SEND ping-pong as ib_send_lat runs it: each
/// side has its next receive posted, sends, and spins on its receive CQ. Prints
/// `fabric-bench,` rows (median and p99 of half the round trip, in microseconds), so a
/// two-VM latency can be set against what the NICs and the fabric alone take.
/// FERRDMA_FABRIC_BENCH_ITERS (default 20000) round trips after 1000 unmeasured,
/// FERRDMA_FABRIC_BENCH_REPS (default 1) rounds. Judges only that every message arrived
/// with its bytes.
#[test]
#[ignore]
fn fabric_bench_send_latency() {
    // Frame buffers kept as the NIC keeps them (test builds poison them otherwise).
    crate::wire::frame_pool::no_poison();
    use crate::fabric::hub::Faults;
    const WARMUP: u64 = 1000;
    let iters = env_or("FERRDMA_FABRIC_BENCH_ITERS", 20_000u64);
    let reps = env_or("FERRDMA_FABRIC_BENCH_REPS", 1u64);
    for rep in 1..=reps {
        let Running {
            dir,
            hub,
            mut a,
            mut b,
            engines,
            ..
        } = Running::start_with(&format!("lat-{rep}"), Faults::default(), Some(128));
        let p = Path {
            mtu: 5,
            ..Path::default()
        };
        a.connect(2, p, 7, 9);
        b.connect(1, p, 9, 7);
        for n in [&mut a, &mut b] {
            let sg = n.dst.sg(0, 2);
            n.h.post_recv(&mut n.qp, &[sg]);
        }
        // One hop: `from` sends message `i`, `to` spins until it has it, checks it and posts
        // its next receive.
        let hop = |from: &mut Nic, to: &mut Nic, i: u64| {
            let msg = [(i & 0xff) as u8, (i >> 8) as u8 ^ 0x5a];
            from.h.write(from.src.gpa, &msg);
            let wr = Wr {
                opcode: sq_op::SEND,
                signaled: true,
                sges: vec![from.src.sg(0, 2)],
                ..Default::default()
            };
            from.h.send(&mut from.qp, &wr);
            // Spinning, not wait_cqes (which sleeps a millisecond a poll), with its bound.
            let t0 = std::time::Instant::now();
            let c = loop {
                let c = to.h.poll_cq_n(&mut to.rcq, 1);
                if !c.is_empty() {
                    break c;
                }
                assert!(
                    t0.elapsed() < std::time::Duration::from_secs(30),
                    "message {i} did not arrive"
                );
                std::hint::spin_loop();
            };
            assert!(c[0].error().is_none(), "{c:?}");
            assert_eq!(to.h.read(to.dst.gpa, 2), msg);
            let sg = to.dst.sg(0, 2);
            to.h.post_recv(&mut to.qp, &[sg]);
            // The SEND's own completion (its ACK) comes when it comes: taken when there.
            let s = from.h.poll_cq(&mut from.scq);
            assert!(s.iter().all(|c| c.error().is_none()), "{s:?}");
        };
        let mut half_rtt_us = Vec::with_capacity(iters as usize);
        for i in 0..WARMUP + iters {
            let t0 = std::time::Instant::now();
            hop(&mut a, &mut b, 2 * i);
            hop(&mut b, &mut a, 2 * i + 1);
            if i >= WARMUP {
                half_rtt_us.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        }
        drop(engines);
        half_rtt_us.sort_by(f64::total_cmp);
        let at = |q: f64| half_rtt_us[((half_rtt_us.len() - 1) as f64 * q) as usize];
        for (metric, v) in [("median_us", at(0.5)), ("p99_us", at(0.99))] {
            println!("fabric-bench,nic-level,ferrdma,fabric_send_lat,2,{rep},{metric},{v:.1}");
        }
        drop(hub);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The engines' CPU cost per byte, without threads: both NICs stepped in this thread (no
/// wake-ups, no scheduler), a 1 MiB RDMA WRITE at a time at path MTU 4096, so the figure
/// moves only with the work the data path does per packet (copies, ICRC, allocations).
/// Prints a `fabric-bench,` CSV row as [`fabric_bench_write_stream`] does (so `make bench`
/// runs it with that one): FERRDMA_FABRIC_BENCH_MIB (default 1024) MiB, twice that in all
/// (the figure is both NICs' work on one core). Judges only that every WRITE completed and
/// the bytes arrived.
#[test]
#[ignore]
fn fabric_bench_engines_in_one_thread() {
    // Frame buffers kept as the NIC keeps them (test builds poison them otherwise).
    crate::wire::frame_pool::no_poison();
    let total = env_or("FERRDMA_FABRIC_BENCH_MIB", 1024u64) * 2;
    let reps = env_or("FERRDMA_FABRIC_BENCH_REPS", 1u64);
    const LEN: u32 = 1 << 20;
    let p = Path {
        mtu: 5,
        ..Path::default()
    };
    let mut net = Net::new(u64::from(LEN), p);
    let data = pattern(LEN as usize, 77);
    net.a.h.write(net.a.src.gpa, &data);
    for rep in 1..=reps {
        net.b.h.write(net.b.dst.gpa, &vec![0u8; LEN as usize]);
        let t0 = std::time::Instant::now();
        for _ in 0..total {
            let wr = net.b.dst.write_from(&net.a.src, LEN);
            net.a.h.send(&mut net.a.qp, &wr);
            let mut sc = Vec::new();
            assert!(net.run(|n| {
                sc.extend(n.a.h.poll_cq(&mut n.a.scq));
                !sc.is_empty()
            }));
            assert!(sc.iter().all(|c| c.error().is_none()), "{sc:?}");
        }
        let secs = t0.elapsed().as_secs_f64();
        assert!(net.b.h.read(net.b.dst.gpa, LEN as usize) == data);
        println!(
            "fabric-bench,nic-level,ferrdma,engines_one_thread_write_mtu4096,{LEN},{rep},MiBps,{:.1}",
            total as f64 / secs
        );
    }
}

/// DCQCN for UD (issue 18): a CE-marked datagram makes the receiving UD QP send the source
/// QP (its DETH) a CNP on the datagram's reverse path, at most one per source per
/// `min_time_between_cnps`, none for a datagram the QP would refuse (Q_Key); the CNP gives
/// the sending UD QP a rate limiter, which then paces its SENDs: those not due wait in the
/// SQ and all go, in order, as the limiter lets them.
#[test]
fn ud_congestion_notification_reaches_and_paces_the_sending_qp() {
    use crate::rdma::congestion::CcConfig;
    use crate::wire::ecn::{self as wecn, Ecn};
    use crate::wire::{opcode as op, parse, IpHeader};
    let mut net = Net::new(1 << 20, Path::default());
    // 100 Mb/s: a cut to 50 Mb/s makes a 264-byte frame take 42 us on the line, so eight
    // SENDs at once outrun the limiter's 100 us of catch-up.
    let cc = CcConfig {
        ecn: true,
        dcqcn: true,
        line_mbps: 100,
        ..CcConfig::default()
    };
    for nic in [&mut net.a, &mut net.b] {
        nic.h.dev().set_cc(cc).unwrap();
    }
    net.ah_to_b(5);
    for _ in 0..16 {
        let sg = net.b.dst.sg(0, 40 + 200);
        net.b.h.post_recv(&mut net.b.ud, &[sg]);
    }
    let wr = |qkey: u32| Wr {
        opcode: sq_op::SEND,
        signaled: true,
        sges: vec![net.a.src.sg(0, 200)],
        hdr_low: 5,
        qw2: (u64::from(UDQPN) << 32) | u64::from(qkey),
        ..Default::default()
    };
    let ce = |f: &[u8]| {
        let mut m = f.to_vec();
        assert_eq!(wecn::ecn(&m), Some(Ecn::Ect0), "UD goes out ECN-capable");
        assert!(wecn::mark_ce(&mut m));
        m
    };
    let cnps = |nic: &mut Nic| -> Vec<Vec<u8>> {
        nic.h
            .dev()
            .take_tx()
            .into_iter()
            .filter(|f| parse(f).is_ok_and(|p| p.headers.bth.opcode == op::CNP))
            .collect()
    };
    // A datagram with the wrong Q_Key, marked: no CNP.
    net.a.h.send(&mut net.a.ud, &wr(QKEY ^ 1));
    let f = net.a.h.dev().take_tx();
    net.b.h.dev().rx_frame(&ce(&f[0]));
    assert!(
        cnps(&mut net.b).is_empty(),
        "no CNP for a datagram the QP refuses"
    );
    // Two marked datagrams: one CNP, to A's UD QP at A's address.
    for _ in 0..2 {
        net.a.h.send(&mut net.a.ud, &wr(QKEY));
        let f = net.a.h.dev().take_tx();
        net.b.h.dev().rx_frame(&ce(&f[0]));
    }
    let got = cnps(&mut net.b);
    assert_eq!(got.len(), 1, "one CNP per source per interval");
    let h = parse(&got[0]).expect("the CNP parses").headers;
    assert!(h.bth.becn);
    assert_eq!((h.bth.dest_qp, h.eth.dst), (UDQPN, mac(1)));
    let IpHeader::V4(ip) = h.ip else {
        panic!("IPv4 reverse path")
    };
    assert_eq!((ip.src, ip.dst), ([10, 0, 0, 2], [10, 0, 0, 1]));
    assert_eq!(ip.traffic_class >> 2, 48, "cnp_dscp");
    assert_eq!(net.b.h.dev().engine().counters().cnps_sent, 1);
    // The CNP cuts A's UD QP to half its line rate.
    net.a.h.dev().rx_frame(&got[0]);
    assert_eq!(net.a.h.dev().engine().counters().cnps_handled, 1);
    assert_eq!(net.a.h.dev().engine().qp_rate(UDQPN), Some(50_000_000));
    // Eight SENDs at once: the limiter lets some go now, the rest as time passes.
    for _ in 0..8 {
        net.a.h.send(&mut net.a.ud, &wr(QKEY));
    }
    let now = net.a.h.dev().take_tx().len();
    assert!((1..8).contains(&now), "{now} of 8 went at once");
    let mut sent = now;
    for _ in 0..100 {
        net.clock.fetch_add(50, Ordering::Relaxed);
        net.a.h.dev().tick();
        sent += net.a.h.dev().take_tx().len();
    }
    assert_eq!(sent, 8, "every paced SEND went");
    let done = net.a.h.poll_cq(&mut net.a.scq);
    assert_eq!(done.len(), 3 + 8);
    assert!(done.iter().all(|c| c.error().is_none()));
}

/// The RC frames in `frames`: (opcode, PSN, AETH syndrome).
fn rc_frames(frames: &[Vec<u8>]) -> Vec<(u8, u32, Option<crate::wire::aeth::Syndrome>)> {
    frames
        .iter()
        .map(|f| {
            let p = crate::wire::parse(f).unwrap();
            let h = p.headers;
            (h.bth.opcode, h.bth.psn, h.ext.aeth.map(|a| a.syndrome))
        })
        .collect()
}

/// Posts `n` signaled 1000-byte WRITEs from A to B, message `i` from and to offset
/// `i * 4096` (one packet each at the default path MTU).
fn post_writes(net: &mut Net, n: u64) -> Vec<u8> {
    let data = pattern(n as usize * 4096, 41);
    net.a.h.write(net.a.src.gpa, &data);
    for i in 0..n {
        let wr = Wr {
            opcode: sq_op::RDMA_WRITE,
            signaled: true,
            sges: vec![net.a.src.sg(i * 4096, 1000)],
            hdr_low: net.b.dst.stag,
            qw2: net.b.dst.va + i * 4096,
            ..Default::default()
        };
        net.a.h.send(&mut net.a.qp, &wr);
    }
    data
}

/// ACK coalescing (`rdma/ack_coalescing.rs`): the ACKs four messages ask for within one
/// batch of received frames become one, for the last PSN, and it completes all four; the
/// same messages delivered one batch each are acknowledged one by one.
#[test]
fn acks_asked_for_within_one_batch_become_one() {
    use crate::wire::aeth::Syndrome;
    use crate::wire::opcode as op;
    for one_batch in [true, false] {
        let mut net = Net::new(1 << 20, Path::default());
        let data = post_writes(&mut net, 4);
        let fa = net.a.h.dev().take_tx();
        let sent = rc_frames(&fa);
        assert_eq!(sent.len(), 4, "one packet a message: {sent:?}");
        if one_batch {
            net.b.h.dev().rx_frames(&fa);
        } else {
            for f in &fa {
                net.b.h.dev().rx_frames(std::slice::from_ref(f));
            }
        }
        let fb = net.b.h.dev().take_tx();
        let acks = rc_frames(&fb);
        let expect: Vec<_> = if one_batch {
            vec![sent[3].1]
        } else {
            sent.iter().map(|s| s.1).collect()
        };
        assert_eq!(
            acks,
            expect
                .iter()
                .map(|&psn| (op::RC_ACK, psn, Some(Syndrome::Ack { credits: 0x1f })))
                .collect::<Vec<_>>()
        );
        let coalesced = net.b.h.dev().engine().acks_coalesced();
        assert_eq!(coalesced, if one_batch { 3 } else { 0 });
        net.carry(fb, false);
        let sc = net.a.h.poll_cq(&mut net.a.scq);
        assert_eq!(sc.len(), 4, "{sc:?}");
        assert!(sc.iter().all(|c| c.error().is_none()), "{sc:?}");
        for i in 0..4 {
            let got = net.b.h.read(net.b.dst.gpa + i * 4096, 1000);
            assert!(got[..] == data[i as usize * 4096..][..1000], "message {i}");
        }
    }
}

/// An ACK owed within a batch goes out before anything else its QP sends: here the NAK for a
/// lost message, so the requester sees the first message acknowledged before it goes back
/// to the second; the wire then delivers all three.
#[test]
fn an_owed_ack_goes_before_the_nak_of_the_same_batch() {
    use crate::wire::aeth::{NakCode, Syndrome};
    use crate::wire::opcode as op;
    let mut net = Net::new(1 << 20, Path::default());
    let data = post_writes(&mut net, 3);
    let mut fa = net.a.h.dev().take_tx();
    let sent = rc_frames(&fa);
    assert_eq!(sent.len(), 3);
    fa.remove(1);
    net.b.h.dev().rx_frames(&fa);
    let fb = net.b.h.dev().take_tx();
    assert_eq!(
        rc_frames(&fb),
        vec![
            (op::RC_ACK, sent[0].1, Some(Syndrome::Ack { credits: 0x1f })),
            (
                op::RC_ACK,
                sent[1].1,
                Some(Syndrome::Nak(NakCode::PsnSequenceError))
            ),
        ]
    );
    net.carry(fb, false);
    let mut sc = Vec::new();
    assert!(net.run(|n| {
        sc.extend(n.a.h.poll_cq(&mut n.a.scq));
        sc.len() >= 3
    }));
    assert!(sc.iter().all(|c| c.error().is_none()), "{sc:?}");
    for i in 0..3 {
        let got = net.b.h.read(net.b.dst.gpa + i * 4096, 1000);
        assert!(got[..] == data[i as usize * 4096..][..1000], "message {i}");
    }
}
