//! The bounded queue of frames from the fabric to one NIC's engine.
//!
//! A channel took a lock and a wake-up per frame on both ends (std's waker: 4% of a two-VM
//! stream's CPU in contended locking alone). Here the switching thread queues a whole burst
//! under one lock and wakes the engine once, and only if it sleeps; the engine takes a batch
//! under one lock. Frames that do not fit are dropped, as a congested port drops them (RC
//! recovers them), so a sender never waits.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

struct State {
    frames: VecDeque<Vec<u8>>,
    /// The receiver sleeps on `ready` (a sender must wake it).
    waiting: bool,
    /// Every sender is gone.
    closed: bool,
}

struct Shared {
    state: Mutex<State>,
    ready: Condvar,
    capacity: usize,
    senders: AtomicUsize,
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
        }),
        ready: Condvar::new(),
        capacity,
        senders: AtomicUsize::new(1),
    });
    (FrameSender(Arc::clone(&shared)), FrameReceiver(shared))
}

impl FrameSender {
    /// Queues `frames` in order while there is room; returns how many were queued (the rest
    /// are dropped).
    pub fn push(&self, frames: impl IntoIterator<Item = Vec<u8>>) -> usize {
        let mut st = self.0.lock();
        let room = self.0.capacity.saturating_sub(st.frames.len());
        let before = st.frames.len();
        st.frames.extend(frames.into_iter().take(room));
        let queued = st.frames.len() - before;
        if queued > 0 && st.waiting {
            st.waiting = false;
            self.0.ready.notify_one();
        }
        queued
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
    Frames(Vec<Vec<u8>>),
    /// Nothing arrived within the timeout.
    Timeout,
    /// Nothing is queued and every sender is gone.
    Closed,
}

impl FrameReceiver {
    /// Waits up to `timeout` for frames; takes up to `max` of them (at least one).
    pub fn recv(&self, max: usize, timeout: Duration) -> Received {
        let mut st = self.0.lock();
        if st.frames.is_empty() && !st.closed {
            st.waiting = true;
            st = match self.0.ready.wait_timeout(st, timeout) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
            st.waiting = false;
        }
        if st.frames.is_empty() {
            return if st.closed {
                Received::Closed
            } else {
                Received::Timeout
            };
        }
        let n = st.frames.len().min(max.max(1));
        Received::Frames(st.frames.drain(..n).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_queue_in_order_up_to_the_capacity_and_the_rest_is_dropped() {
        let (tx, rx) = frame_queue(3);
        assert_eq!(tx.push([vec![1], vec![2]]), 2);
        assert_eq!(tx.push([vec![3], vec![4], vec![5]]), 1);
        assert_eq!(
            rx.recv(2, Duration::ZERO),
            Received::Frames(vec![vec![1], vec![2]])
        );
        assert_eq!(rx.recv(8, Duration::ZERO), Received::Frames(vec![vec![3]]));
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
            Received::Frames(vec![vec![7], vec![8]])
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
        assert_eq!(rx.recv(8, Duration::ZERO), Received::Frames(vec![vec![9]]));
        assert_eq!(rx.recv(8, Duration::ZERO), Received::Closed);
    }
}
