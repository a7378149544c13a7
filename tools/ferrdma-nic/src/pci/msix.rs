//! MSI-X vectors as the client wires them: one eventfd per vector, from `SET_IRQS` on the
//! MSI-X irq index. QEMU emulates the MSI-X table itself; raising a vector here means
//! writing 1 to its eventfd, and QEMU turns that into the guest's MSI message (or a pending
//! bit if the guest masked the vector).

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;

use thiserror::Error;

use crate::interface::MSIX_VECTORS;

/// Why a vector could not be raised or (re)wired.
#[derive(Debug, Error)]
pub enum MsixError {
    #[error("vector {0} does not exist (the function has {MSIX_VECTORS})")]
    NoSuchVector(u32),
    #[error("vectors {start}..{start}+{count} exceed the {MSIX_VECTORS} the function has")]
    Range { start: u32, count: u32 },
    #[error("vector {0} has no eventfd")]
    NoEventfd(u32),
    #[error("MSI-X is disabled in the capability")]
    Disabled,
    #[error("{fds} fds for {count} vectors")]
    FdCount { fds: usize, count: u32 },
    #[error("fd {index} of the request is not an eventfd ({kind})")]
    NotEventfd { index: usize, kind: String },
    #[error("making the eventfd of the request non-blocking failed: {0}")]
    NonBlocking(#[source] std::io::Error),
    #[error("writing the eventfd of vector {vector} failed: {source}")]
    Signal {
        vector: u32,
        #[source]
        source: std::io::Error,
    },
}

/// What `/proc/self/fd` says an eventfd is.
const EVENTFD_LINK: &str = "anon_inode:[eventfd]";

/// Accepts `fd` as an interrupt only if it is an eventfd, and makes it non-blocking.
///
/// Raising a vector writes to its fd while the device lock is held. Anything else a client
/// might pass (a pipe nobody drains, a socket, a regular file that grows with every
/// interrupt) could block that write or grow without bound; even an eventfd blocks a
/// write when the client has filled its counter, unless it is non-blocking. QEMU creates
/// its eventfds non-blocking already, so setting `O_NONBLOCK` (a flag shared with the
/// client) changes nothing for it.
fn accept_eventfd(index: usize, fd: &File) -> Result<(), MsixError> {
    let raw = fd.as_raw_fd();
    let kind = std::fs::read_link(format!("/proc/self/fd/{raw}"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|e| format!("unknown: {e}"));
    if kind != EVENTFD_LINK {
        return Err(MsixError::NotEventfd { index, kind });
    }
    // SAFETY: fcntl on a descriptor we own; F_GETFL/F_SETFL take integer arguments.
    let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
    if flags < 0 {
        return Err(MsixError::NonBlocking(std::io::Error::last_os_error()));
    }
    if flags & libc::O_NONBLOCK == 0 {
        // SAFETY: as above.
        if unsafe { libc::fcntl(raw, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(MsixError::NonBlocking(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Something that can raise an MSI-X vector. The register file depends only on this.
pub trait InterruptSink {
    /// Raises `vector` once.
    fn raise(&self, vector: u32) -> Result<(), MsixError>;
}

/// The eventfds of the MSI-X vectors.
#[derive(Debug)]
pub struct MsixVectors {
    eventfds: Vec<Option<File>>,
}

impl Default for MsixVectors {
    fn default() -> Self {
        Self::new()
    }
}

impl MsixVectors {
    /// All [`MSIX_VECTORS`] vectors, none wired.
    pub fn new() -> Self {
        Self {
            eventfds: (0..MSIX_VECTORS).map(|_| None).collect(),
        }
    }

    fn range(start: u32, count: u32) -> Result<std::ops::Range<usize>, MsixError> {
        let end = start
            .checked_add(count)
            .filter(|&e| e <= MSIX_VECTORS)
            .ok_or(MsixError::Range { start, count })?;
        Ok(start as usize..end as usize)
    }

    /// Wires vectors `start..start + count` to `fds` (one per vector), or unwires them if
    /// `fds` is empty. On error nothing changes.
    pub fn set(&mut self, start: u32, count: u32, fds: Vec<File>) -> Result<(), MsixError> {
        let range = Self::range(start, count)?;
        if !fds.is_empty() && fds.len() != range.len() {
            return Err(MsixError::FdCount {
                fds: fds.len(),
                count,
            });
        }
        for (i, fd) in fds.iter().enumerate() {
            accept_eventfd(i, fd)?;
        }
        let slots = self
            .eventfds
            .get_mut(range)
            .ok_or(MsixError::Range { start, count })?;
        if fds.is_empty() {
            slots.iter_mut().for_each(|s| *s = None);
        } else {
            for (slot, fd) in slots.iter_mut().zip(fds) {
                *slot = Some(fd);
            }
        }
        Ok(())
    }

    /// Raises vectors `start..start + count` (the `SET_IRQS` loopback trigger), after
    /// checking that all exist and are wired: a refused request raises none.
    pub fn raise_range(&self, start: u32, count: u32) -> Result<(), MsixError> {
        let range = Self::range(start, count)?;
        for v in range.clone() {
            if !matches!(self.eventfds.get(v), Some(Some(_))) {
                return Err(MsixError::NoEventfd(v as u32));
            }
        }
        for v in range {
            self.raise(v as u32)?;
        }
        Ok(())
    }

    /// Unwires every vector.
    pub fn clear(&mut self) {
        self.eventfds.iter_mut().for_each(|s| *s = None);
    }

    /// Whether `vector` has an eventfd.
    pub fn is_wired(&self, vector: u32) -> bool {
        matches!(self.eventfds.get(vector as usize), Some(Some(_)))
    }
}

impl InterruptSink for MsixVectors {
    fn raise(&self, vector: u32) -> Result<(), MsixError> {
        let slot = self
            .eventfds
            .get(vector as usize)
            .ok_or(MsixError::NoSuchVector(vector))?;
        let mut fd = slot.as_ref().ok_or(MsixError::NoEventfd(vector))?;
        match fd.write(&1u64.to_ne_bytes()) {
            Ok(_) => Ok(()),
            // The counter is saturated (the client filled it): the interrupt is pending
            // anyway, and waiting would hang the device.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
            Err(source) => Err(MsixError::Signal { vector, source }),
        }
    }
}

/// [`MsixVectors`] gated by the MSI-X Enable bit of the capability.
pub struct GatedMsix<'a> {
    pub vectors: &'a MsixVectors,
    pub enabled: bool,
}

impl InterruptSink for GatedMsix<'_> {
    fn raise(&self, vector: u32) -> Result<(), MsixError> {
        if vector >= MSIX_VECTORS {
            return Err(MsixError::NoSuchVector(vector));
        }
        if !self.enabled {
            return Err(MsixError::Disabled);
        }
        self.vectors.raise(vector)
    }
}

#[cfg(test)]
pub(crate) mod test_util {
    use std::fs::File;
    use std::io::Read;
    use std::os::fd::FromRawFd;

    /// A non-blocking eventfd for tests.
    pub fn eventfd() -> File {
        // SAFETY: plain eventfd creation; the fd is owned by the returned File.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
        // SAFETY: fresh owned descriptor.
        unsafe { File::from_raw_fd(fd) }
    }

    /// Reads the eventfd counter (resetting it); 0 if nothing was signalled.
    pub fn count(f: &File) -> u64 {
        let mut buf = [0u8; 8];
        let mut r = f;
        match r.read(&mut buf) {
            Ok(8) => u64::from_ne_bytes(buf),
            Ok(n) => panic!("short eventfd read: {n}"),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(e) => panic!("eventfd read: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_util::{count, eventfd};
    use super::*;

    #[test]
    fn raising_writes_one_to_the_eventfd() {
        let mut v = MsixVectors::new();
        let e = eventfd();
        v.set(3, 1, vec![e.try_clone().unwrap()]).unwrap();
        v.raise(3).unwrap();
        v.raise(3).unwrap();
        assert_eq!(count(&e), 2);
        assert_eq!(count(&e), 0);
    }

    #[test]
    fn unwired_and_missing_vectors_fail() {
        let v = MsixVectors::new();
        assert!(matches!(v.raise(0), Err(MsixError::NoEventfd(0))));
        assert!(matches!(
            v.raise(MSIX_VECTORS),
            Err(MsixError::NoSuchVector(_))
        ));
        assert!(matches!(v.raise(u32::MAX), Err(MsixError::NoSuchVector(_))));
    }

    #[test]
    fn set_validates_ranges_and_fd_counts() {
        let mut v = MsixVectors::new();
        assert!(matches!(
            v.set(MSIX_VECTORS - 1, 2, vec![]),
            Err(MsixError::Range { .. })
        ));
        assert!(matches!(
            v.set(u32::MAX, 2, vec![]),
            Err(MsixError::Range { .. })
        ));
        assert!(matches!(
            v.set(0, 2, vec![eventfd()]),
            Err(MsixError::FdCount { fds: 1, count: 2 })
        ));
        v.set(0, 2, vec![eventfd(), eventfd()]).unwrap();
        assert!(v.is_wired(0) && v.is_wired(1) && !v.is_wired(2));
        v.set(1, 1, vec![]).unwrap();
        assert!(v.is_wired(0) && !v.is_wired(1));
        v.clear();
        assert!(!v.is_wired(0));
    }

    #[test]
    fn only_eventfds_are_accepted_and_made_non_blocking() {
        let mut v = MsixVectors::new();
        let (r, w) = crate::dma::mapping::test_util::pipe();
        for f in [r, w, crate::dma::mapping::test_util::memfd(8)] {
            assert!(matches!(
                v.set(0, 1, vec![f]),
                Err(MsixError::NotEventfd { index: 0, .. })
            ));
        }
        // One bad fd among good ones refuses the whole request.
        let (_r, w) = crate::dma::mapping::test_util::pipe();
        assert!(v.set(0, 2, vec![eventfd(), w]).is_err());
        assert!(!v.is_wired(0));
        // A blocking eventfd whose counter the client filled: raising must not hang.
        // SAFETY: plain eventfd creation; the fd is owned by the File.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: fresh owned descriptor.
        let mut e = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        e.write_all(&(u64::MAX - 1).to_ne_bytes()).unwrap();
        v.set(0, 1, vec![e.try_clone().unwrap()]).unwrap();
        v.raise(0).unwrap();
        v.raise(0).unwrap();
        assert_eq!(count(&e), u64::MAX - 1);
    }

    #[test]
    fn raise_range_checks_everything_first() {
        let mut v = MsixVectors::new();
        let a = eventfd();
        v.set(0, 1, vec![a.try_clone().unwrap()]).unwrap();
        assert!(matches!(v.raise_range(0, 2), Err(MsixError::NoEventfd(1))));
        assert!(v.raise_range(0, u32::MAX).is_err());
        assert!(v.raise_range(u32::MAX, 2).is_err());
        assert_eq!(count(&a), 0, "a refused request raises nothing");
        v.raise_range(0, 1).unwrap();
        assert_eq!(count(&a), 1);
    }

    #[test]
    fn gate_requires_enable() {
        let mut v = MsixVectors::new();
        let e = eventfd();
        v.set(0, 1, vec![e.try_clone().unwrap()]).unwrap();
        let off = GatedMsix {
            vectors: &v,
            enabled: false,
        };
        assert!(matches!(off.raise(0), Err(MsixError::Disabled)));
        assert_eq!(count(&e), 0);
        let on = GatedMsix {
            vectors: &v,
            enabled: true,
        };
        on.raise(0).unwrap();
        assert_eq!(count(&e), 1);
    }
}
