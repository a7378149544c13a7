//! The bounded queue of frames from the fabric to one NIC's engine.
//!
//! A channel took a lock and a wake-up per frame on both ends (std's waker: 4% of a two-VM
//! stream's CPU in contended locking alone). Here the switching thread queues a whole burst
//! under one lock and wakes the engine once, and only if it sleeps; the engine takes a batch
//! under one lock. Frames that do not fit are dropped, as a congested port drops them (RC
//! recovers them), so a sender never waits.
//!
//! Direct delivery: a queue may name its NIC's [`Deliver`] (the engine thread's device).
//! A burst that finds the queue empty, no batch in the engine's hands and the device free
//! is then delivered on the sending thread itself ([`FrameSender::deliver`]): the engine
//! thread is not woken, and a stream between two NICs runs on one thread, the sender's,
//! as long as the receiver keeps up (a wake-up and a switch between threads cost as much as
//! moving a 4 KiB packet on the hosts we measured). Order holds: a burst goes directly only
//! when nothing older for that NIC is queued or being delivered, and nothing else is
//! delivered to it (the engine does not take the queue) until that burst is done. Frames
//! the device emits while a burst is delivered directly are queued, never delivered
//! directly in turn (a thread delivers one burst directly at a time), so the nesting
//! depth is one and no thread waits for a device lock while holding another.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use crate::wire::RxFrame;

/// A NIC that takes frames on the sender's thread.
pub trait Deliver: Send + Sync {
    /// Delivers `frames` now, in order, unless the NIC is busy (its lock is taken): then
    /// does nothing and returns `None`. Otherwise returns when the NIC's engine wants to
    /// run next (its device clock, microseconds), if ever.
    fn try_deliver(&self, frames: &[RxFrame]) -> Option<Option<u64>>;
}

thread_local! {
    /// This thread is delivering a burst directly: what the receiving NIC emits is queued.
    static DELIVERING: Cell<bool> = const { Cell::new(false) };
}

struct State {
    frames: VecDeque<RxFrame>,
    /// The receiver sleeps on `ready` (a sender must wake it).
    waiting: bool,
    /// Every sender is gone.
    closed: bool,
    /// Where a burst may go directly (the engine thread holds the `Arc`).
    direct: Option<Weak<dyn Deliver>>,
    /// The engine holds frames it took and may not have delivered yet (until it asks for
    /// more).
    in_hand: bool,
    /// A sender is delivering a burst directly: the engine takes nothing until it is done.
    direct_busy: bool,
    /// When the sleeping receiver wakes by itself (its device clock), if it said.
    wakes_at: Option<u64>,
}

struct Shared {
    state: Mutex<State>,
    ready: Condvar,
    capacity: usize,
    senders: AtomicUsize,
    /// Bursts delivered on the sending thread.
    direct: AtomicU64,
    /// Bursts queued for the engine thread (see [`QueueCounters`]).
    queued: AtomicU64,
}

/// How the bursts [`FrameSender::deliver`] was given went: on the sender's thread, or
/// queued for the engine thread (the fabric's `stats`). A queued burst need not cross
/// threads: what a NIC emits while a burst is delivered directly is queued, and the thread
/// that delivered takes it up when it next runs that NIC's engine (the ACKs of a stream
/// whose sender is that thread's own NIC).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueCounters {
    pub direct: u64,
    pub queued: u64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

/// Queues frames (cloneable: one per switching path).
pub struct FrameSender(Arc<Shared>);

/// Takes frames (one per queue: the engine thread's).
pub struct FrameReceiver(Arc<Shared>);

/// A queue of at most `capacity` frames.
pub fn frame_queue(capacity: usize) -> (FrameSender, FrameReceiver) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            frames: VecDeque::new(),
            waiting: false,
            closed: false,
            direct: None,
            in_hand: false,
            direct_busy: false,
            wakes_at: None,
        }),
        ready: Condvar::new(),
        capacity,
        senders: AtomicUsize::new(1),
        direct: AtomicU64::new(0),
        queued: AtomicU64::new(0),
    });
    (FrameSender(Arc::clone(&shared)), FrameReceiver(shared))
}

impl FrameSender {
    /// Queues `frames` in order while there is room; returns how many were queued (the rest
    /// are dropped).
    pub fn push<F: Into<RxFrame>>(&self, frames: impl IntoIterator<Item = F>) -> usize {
        let mut st = self.0.lock();
        let room = self.0.capacity.saturating_sub(st.frames.len());
        let before = st.frames.len();
        st.frames
            .extend(frames.into_iter().take(room).map(Into::into));
        let queued = st.frames.len() - before;
        if queued > 0 && st.waiting {
            st.waiting = false;
            self.0.ready.notify_one();
        }
        queued
    }

    /// Delivers `frames` directly when it can (see the module comment), else queues them
    /// as [`FrameSender::push`] does; returns how many were delivered or queued.
    pub fn deliver(&self, frames: Vec<RxFrame>) -> usize {
        let Some(nic) = self.begin_direct() else {
            self.0.queued.fetch_add(1, Ordering::Relaxed);
            return self.push(frames);
        };
        DELIVERING.with(|d| d.set(true));
        let done = nic.try_deliver(&frames);
        DELIVERING.with(|d| d.set(false));
        self.end_direct(done.flatten());
        match done {
            Some(_) => {
                self.0.direct.fetch_add(1, Ordering::Relaxed);
                let n = frames.len();
                // Their buffers serve this thread's NIC for its next frames.
                crate::wire::frame_pool::recycle(frames.into_iter().map(RxFrame::into_bytes));
                n
            }
            None => {
                self.0.queued.fetch_add(1, Ordering::Relaxed);
                self.push(frames)
            }
        }
    }

    /// How the bursts [`FrameSender::deliver`] was given went, since the queue was made.
    pub fn counters(&self) -> QueueCounters {
        QueueCounters {
            direct: self.0.direct.load(Ordering::Relaxed),
            queued: self.0.queued.load(Ordering::Relaxed),
        }
    }

    /// Claims the queue's NIC for a direct delivery, if it may take one now.
    fn begin_direct(&self) -> Option<Arc<dyn Deliver>> {
        if DELIVERING.with(Cell::get) {
            return None;
        }
        let mut st = self.0.lock();
        if !st.frames.is_empty() || st.in_hand || st.direct_busy {
            return None;
        }
        let nic = st.direct.as_ref()?.upgrade()?;
        st.direct_busy = true;
        Some(nic)
    }

    /// Ends a direct delivery; the NIC wants to run at `next` (if it took the burst). Wakes
    /// the receiver if frames were queued meanwhile or it would sleep past `next`.
    fn end_direct(&self, next: Option<u64>) {
        let mut st = self.0.lock();
        st.direct_busy = false;
        let sooner = next.is_some_and(|t| st.wakes_at.is_none_or(|w| t < w));
        if st.waiting && (!st.frames.is_empty() || sooner) {
            st.waiting = false;
            self.0.ready.notify_one();
        }
    }
}

impl Clone for FrameSender {
    fn clone(&self) -> Self {
        self.0.senders.fetch_add(1, Ordering::Relaxed);
        FrameSender(Arc::clone(&self.0))
    }
}

impl Drop for FrameSender {
    fn drop(&mut self) {
        if self.0.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.lock().closed = true;
            self.0.ready.notify_one();
        }
    }
}

/// What [`FrameReceiver::recv`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    Frames(Vec<RxFrame>),
    /// Nothing arrived within the timeout.
    Timeout,
    /// Nothing is queued and every sender is gone.
    Closed,
}

impl FrameReceiver {
    /// Waits up to `timeout` for frames; takes up to `max` of them (at least one). Calling
    /// it again says the frames taken before are delivered.
    pub fn recv(&self, max: usize, timeout: Duration) -> Received {
        self.recv_or_wake(max, timeout, None)
    }

    /// As [`FrameReceiver::recv`], and returns `Timeout` early when the frames that came
    /// must wait for a direct delivery to end, or a direct delivery wants the receiver to
    /// run before `wakes_at` (its device clock: when it would wake by itself; `None`: it
    /// runs again at once after any direct delivery).
    pub fn recv_or_wake(&self, max: usize, timeout: Duration, wakes_at: Option<u64>) -> Received {
        let mut st = self.0.lock();
        st.in_hand = false;
        if (st.frames.is_empty() || st.direct_busy) && !st.closed {
            st.waiting = true;
            st.wakes_at = wakes_at;
            st = match self.0.ready.wait_timeout(st, timeout) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
            st.waiting = false;
        }
        if st.frames.is_empty() || st.direct_busy {
            return if st.closed && st.frames.is_empty() {
                Received::Closed
            } else {
                Received::Timeout
            };
        }
        let n = st.frames.len().min(max.max(1));
        st.in_hand = true;
        Received::Frames(st.frames.drain(..n).collect())
    }

    /// Lets senders deliver to `nic` on their own threads (see the module comment) while
    /// the `Arc` lives; `None` stops it.
    pub fn set_direct(&self, nic: Option<&Arc<dyn Deliver>>) {
        self.0.lock().direct = nic.map(Arc::downgrade);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One-byte frames of unknown ICRC.
    fn fr(bytes: &[u8]) -> Vec<RxFrame> {
        bytes.iter().map(|&b| RxFrame::from_wire(vec![b])).collect()
    }

    #[test]
    fn bursts_queue_in_order_up_to_the_capacity_and_the_rest_is_dropped() {
        let (tx, rx) = frame_queue(3);
        assert_eq!(tx.push([vec![1], vec![2]]), 2);
        assert_eq!(tx.push([vec![3], vec![4], vec![5]]), 1);
        assert_eq!(rx.recv(2, Duration::ZERO), Received::Frames(fr(&[1, 2])));
        assert_eq!(rx.recv(8, Duration::ZERO), Received::Frames(fr(&[3])));
        assert_eq!(rx.recv(8, Duration::ZERO), Received::Timeout);
    }

    #[test]
    fn a_sleeping_receiver_is_woken_by_a_burst_from_another_thread() {
        let (tx, rx) = frame_queue(16);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            tx.push([vec![7], vec![8]]);
            tx
        });
        let t0 = std::time::Instant::now();
        assert_eq!(
            rx.recv(8, Duration::from_secs(10)),
            Received::Frames(fr(&[7, 8]))
        );
        assert!(t0.elapsed() < Duration::from_secs(5));
        drop(t.join().unwrap());
        assert_eq!(rx.recv(8, Duration::from_secs(10)), Received::Closed);
    }

    #[test]
    fn frames_queued_before_the_last_sender_left_are_still_received() {
        let (tx, rx) = frame_queue(4);
        let tx2 = tx.clone();
        drop(tx);
        tx2.push([vec![9]]);
        drop(tx2);
        assert_eq!(rx.recv(8, Duration::ZERO), Received::Frames(fr(&[9])));
        assert_eq!(rx.recv(8, Duration::ZERO), Received::Closed);
    }

    /// A NIC for direct delivery: records each burst with the thread that delivered it,
    /// says it is busy while `busy` is set, and may send a frame on to another queue from
    /// inside the delivery (as a receiving engine sends its ACKs).
    struct Recorder {
        got: Mutex<Vec<(std::thread::ThreadId, Vec<Vec<u8>>)>>,
        busy: std::sync::atomic::AtomicBool,
        next_due: Option<u64>,
        forward: Mutex<Option<FrameSender>>,
    }

    impl Recorder {
        fn new(next_due: Option<u64>) -> Arc<Self> {
            Arc::new(Self {
                got: Mutex::new(Vec::new()),
                busy: Default::default(),
                next_due,
                forward: Mutex::new(None),
            })
        }

        fn bursts(&self) -> Vec<Vec<Vec<u8>>> {
            self.got
                .lock()
                .unwrap()
                .iter()
                .map(|(_, f)| f.clone())
                .collect()
        }
    }

    impl Deliver for Recorder {
        fn try_deliver(&self, frames: &[RxFrame]) -> Option<Option<u64>> {
            if self.busy.load(Ordering::SeqCst) {
                return None;
            }
            let me = std::thread::current().id();
            let bytes = frames.iter().map(|f| f.bytes().to_vec()).collect();
            self.got.lock().unwrap().push((me, bytes));
            if let Some(tx) = self.forward.lock().unwrap().as_ref() {
                tx.deliver(fr(&[0xac]));
            }
            Some(self.next_due)
        }
    }

    fn attach(rx: &FrameReceiver, nic: &Arc<Recorder>) -> Arc<dyn Deliver> {
        let d: Arc<dyn Deliver> = Arc::clone(nic) as Arc<dyn Deliver>;
        rx.set_direct(Some(&d));
        d
    }

    #[test]
    fn a_burst_to_an_idle_nic_is_delivered_on_the_senders_thread_and_not_queued() {
        let (tx, rx) = frame_queue(8);
        let nic = Recorder::new(None);
        let _held = attach(&rx, &nic);
        assert_eq!(tx.deliver(fr(&[1, 2])), 2);
        let got = nic.got.lock().unwrap().clone();
        assert_eq!(
            got,
            vec![(std::thread::current().id(), vec![vec![1], vec![2]])]
        );
        assert_eq!(rx.recv(8, Duration::ZERO), Received::Timeout);
        // The engine thread ended: bursts are queued again.
        rx.set_direct(None);
        assert_eq!(tx.deliver(fr(&[3])), 1);
        assert_eq!(nic.bursts().len(), 1);
        assert_eq!(rx.recv(8, Duration::ZERO), Received::Frames(fr(&[3])));
    }

    #[test]
    fn a_burst_queues_behind_older_frames_a_batch_in_hand_and_a_busy_nic() {
        let (tx, rx) = frame_queue(8);
        let nic = Recorder::new(None);
        let _held = attach(&rx, &nic);
        // Older frames are queued: the burst goes behind them, in order.
        tx.push([vec![1]]);
        tx.deliver(fr(&[2]));
        assert_eq!(rx.recv(1, Duration::ZERO), Received::Frames(fr(&[1])));
        // The engine holds frame 1 until it asks again: still queued.
        tx.deliver(fr(&[3]));
        assert_eq!(rx.recv(8, Duration::ZERO), Received::Frames(fr(&[2, 3])));
        // The NIC's lock is taken: queued.
        nic.busy.store(true, Ordering::SeqCst);
        assert_eq!(rx.recv(8, Duration::ZERO), Received::Timeout);
        tx.deliver(fr(&[4]));
        assert!(nic.bursts().is_empty());
        nic.busy.store(false, Ordering::SeqCst);
        // Queued frame 4 is older than frame 5: 5 waits behind it.
        tx.deliver(fr(&[5]));
        assert!(nic.bursts().is_empty());
        assert_eq!(rx.recv(8, Duration::ZERO), Received::Frames(fr(&[4, 5])));
        // All taken and asked again: direct once more.
        assert_eq!(rx.recv(8, Duration::ZERO), Received::Timeout);
        tx.deliver(fr(&[6]));
        assert_eq!(nic.bursts(), vec![vec![vec![6]]]);
        // The fabric's stats: bursts 2 to 5 were queued, 6 was not (a push is no burst).
        assert_eq!(
            tx.counters(),
            QueueCounters {
                direct: 1,
                queued: 4
            }
        );
    }

    #[test]
    fn what_a_nic_emits_during_a_direct_delivery_is_queued_not_delivered_in_turn() {
        let (tx_b, rx_b) = frame_queue(8);
        let (tx_a, rx_a) = frame_queue(8);
        let (a, b) = (Recorder::new(None), Recorder::new(None));
        let (_ha, _hb) = (attach(&rx_a, &a), attach(&rx_b, &b));
        *b.forward.lock().unwrap() = Some(tx_a.clone());
        tx_b.deliver(fr(&[1]));
        assert_eq!(b.bursts(), vec![vec![vec![1]]]);
        assert!(a.bursts().is_empty(), "no nested direct delivery");
        assert_eq!(rx_a.recv(8, Duration::ZERO), Received::Frames(fr(&[0xac])));
        // Outside a delivery the same queue takes bursts directly again.
        assert_eq!(rx_a.recv(8, Duration::ZERO), Received::Timeout);
        tx_a.deliver(fr(&[2]));
        assert_eq!(a.bursts(), vec![vec![vec![2]]]);
    }

    #[test]
    fn a_direct_delivery_wakes_the_sleeping_receiver_only_when_due_before_it_wakes() {
        for (due, woken) in [(Some(500), true), (Some(5000), false), (None, false)] {
            let (tx, rx) = frame_queue(8);
            let nic = Recorder::new(due);
            let _held = attach(&rx, &nic);
            let waiter = std::thread::spawn(move || {
                let t0 = std::time::Instant::now();
                let r = rx.recv_or_wake(8, Duration::from_millis(600), Some(1000));
                (r, t0.elapsed())
            });
            // The delivery must find the receiver asleep.
            std::thread::sleep(Duration::from_millis(100));
            tx.deliver(fr(&[1]));
            let (r, waited) = waiter.join().unwrap();
            assert_eq!(r, Received::Timeout);
            assert_eq!(nic.bursts(), vec![vec![vec![1]]]);
            assert_eq!(
                waited < Duration::from_millis(550),
                woken,
                "due {due:?}: waited {waited:?}"
            );
        }
    }
}
