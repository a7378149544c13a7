//! Frame buffers kept for reuse by the thread that let them go.
//!
//! A data packet's frame was allocated and zeroed by its sender, then freed by its receiver,
//! every packet: the zeroing alone was ~9% of a one-thread stream's CPU and malloc/free ~6%.
//! When a stream runs on one thread (direct delivery, `fabric/queue.rs`), the receiving NIC
//! lets a frame go on the very thread whose NIC builds the next one: the buffer is kept here
//! and [`take`]n again, and its old bytes are simply overwritten, not zeroed first.
//!
//! Whoever takes a buffer must overwrite all of it: its bytes are another frame's (another
//! guest's traffic). `packet::build_with` writes every byte of the frame it builds (headers,
//! payload through its `fill`, which must write all of its slice or fail, pad, ICRC). In
//! test builds a kept buffer is poisoned, so a builder that left a byte unwritten sends
//! poison that the data-checking tests see.

use std::cell::RefCell;

/// Buffers kept per thread: a few bursts' worth of data packets.
const KEEP: usize = 128;
/// Only a data packet's buffer is kept (at least this much room): small frames (ACKs) cost
/// little to allocate and would crowd the pool.
const MIN_ROOM: usize = 1024;
/// Nor anything larger than a jumbo frame's.
const MAX_ROOM: usize = 16 << 10;

/// What kept buffers are filled with in test builds.
#[cfg(test)]
pub const POISON: u8 = 0xa5;

thread_local! {
    static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer of `len` bytes for a frame; its contents are unspecified (zeros, or a frame
/// this thread let go) and must all be overwritten.
pub fn take(len: usize) -> Vec<u8> {
    if len >= MIN_ROOM {
        let kept = POOL.with(|p| p.borrow_mut().pop());
        if let Some(mut v) = kept.filter(|v| v.capacity() >= len) {
            if v.len() >= len {
                v.truncate(len);
            } else {
                // Only the bytes past the old frame's end are zeroed.
                v.resize(len, 0);
            }
            return v;
        }
    }
    vec![0; len]
}

/// Keeps what fits of `frames` for this thread's next [`take`]s.
pub fn recycle(frames: impl IntoIterator<Item = Vec<u8>>) {
    POOL.with(|p| {
        let mut pool = p.borrow_mut();
        for f in frames {
            if pool.len() >= KEEP {
                break;
            }
            if (MIN_ROOM..=MAX_ROOM).contains(&f.capacity()) {
                pool.push(kept(f));
            }
        }
    });
}

/// Test builds poison kept buffers unless a benchmark said not to ([`no_poison`]): the
/// poisoning costs what the pool saves.
#[cfg(test)]
static POISONING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Benchmarks (test builds) keep buffers as they are, as the NIC does: for the whole
/// process, so they run by themselves (`fabric_bench`, one test thread).
#[cfg(test)]
pub fn no_poison() {
    POISONING.store(false, std::sync::atomic::Ordering::Relaxed);
}

/// A buffer as the pool keeps it: poisoned whole in test builds.
#[cfg(test)]
fn kept(mut f: Vec<u8>) -> Vec<u8> {
    if POISONING.load(std::sync::atomic::Ordering::Relaxed) {
        let room = f.capacity();
        f.clear();
        f.resize(room, POISON);
    }
    f
}

#[cfg(not(test))]
fn kept(f: Vec<u8>) -> Vec<u8> {
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_buffer_comes_back_at_the_length_asked_for() {
        let mut v = vec![1u8; 4000];
        v.reserve_exact(100);
        let room = v.capacity();
        recycle([v, vec![2u8; 64], vec![3u8; 64 << 10]]);
        let got = take(3000);
        assert_eq!(got.len(), 3000);
        assert_eq!(got.capacity(), room, "the 4000-byte buffer, not a new one");
        // The small and the huge buffer were not kept.
        let fresh = take(3000);
        assert_eq!(fresh, vec![0u8; 3000]);
        // A buffer too small for the frame is not used.
        recycle([got]);
        assert_eq!(take(room + 1).len(), room + 1);
        assert!(take(10).iter().all(|&b| b == 0));
    }

    #[test]
    fn test_builds_poison_what_they_keep() {
        recycle([vec![7u8; 2048]]);
        let v = take(2048);
        assert!(v.iter().all(|&b| b == POISON));
    }

    #[test]
    fn the_pool_keeps_a_bounded_number_of_buffers() {
        recycle((0..2 * KEEP).map(|_| vec![0u8; 2048]));
        assert_eq!(POOL.with(|p| p.borrow().len()), KEEP);
        POOL.with(|p| p.borrow_mut().clear());
    }
}
