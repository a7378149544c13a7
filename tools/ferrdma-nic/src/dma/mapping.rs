//! One range of a file descriptor the client handed us, with bounds-checked byte copies.
//!
//! This is the only place that touches guest memory. Every access goes through
//! [`Mapping::read_at`] / [`Mapping::write_at`], which check `offset + len <= len()` with
//! overflow-checked arithmetic first. A file the client can no longer shrink (a sealed
//! memfd, QEMU's default) is `mmap`ed; a tmpfs file it could truncate is read and written
//! with `pread`/`pwrite`, which report a truncated file as an error where a mapping would
//! raise `SIGBUS` and end the process.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;

use thiserror::Error;

/// Why a mapping could not be created.
#[derive(Debug, Error)]
pub enum MapError {
    #[error("mapping of zero bytes")]
    Empty,
    #[error("file offset {offset:#x} + size {size:#x} overflows")]
    Overflow { offset: u64, size: u64 },
    #[error(
        "file range {offset:#x}+{size:#x} lies beyond the end of the file ({file_size:#x} bytes)"
    )]
    BeyondFile {
        offset: u64,
        size: u64,
        file_size: u64,
    },
    #[error("size {0:#x} does not fit in this address space")]
    TooLarge(u64),
    #[error("the DMA fd is not a regular file (memfd, tmpfs or hugetlbfs file)")]
    NotRegular,
    #[error(
        "the DMA fd's file system ({0:#x}) is not tmpfs or hugetlbfs (use a memfd or /dev/shm)"
    )]
    FileSystem(u64),
    #[error("fstat of the DMA fd failed: {0}")]
    Stat(#[source] std::io::Error),
    #[error("the DMA fd is not open for {0}")]
    Access(&'static str),
    #[error("duplicating the DMA fd failed: {0}")]
    Dup(#[source] std::io::Error),
    #[error("mmap failed: {0}")]
    Mmap(#[source] std::io::Error),
}

/// Why an access to a mapping was refused.
#[derive(Debug, Error, PartialEq, Eq, Clone, Copy)]
pub enum AccessError {
    #[error("access {offset:#x}+{len:#x} outside mapping of {size:#x} bytes")]
    OutOfBounds { offset: u64, len: u64, size: u64 },
    #[error("write to a read-only mapping")]
    ReadOnly,
    #[error("the file behind the mapping is shorter now, or I/O on it failed")]
    Unavailable,
}

/// How the bytes of a [`Mapping`] are reached.
#[derive(Debug)]
enum Backing {
    /// A shared mmap; unmapped on drop.
    Mmap {
        /// Start of the whole mmap (page aligned).
        base: NonNull<u8>,
        /// Length of the whole mmap, including the alignment slack before the range.
        map_len: usize,
        /// Bytes between `base` and the first byte of the range.
        slack: usize,
    },
    /// `pread`/`pwrite` at `offset + ...` of our own duplicate of the client's fd.
    FileIo { file: File, offset: u64 },
}

/// `size` bytes of a file starting at a (not necessarily page-aligned) file offset.
#[derive(Debug)]
pub struct Mapping {
    backing: Backing,
    /// Usable size in bytes.
    size: usize,
    writable: bool,
}

// SAFETY: the mmap is owned exclusively by this value; the raw pointer is only used to copy
// bytes in and out under bounds checks, which is sound from any thread.
unsafe impl Send for Mapping {}

fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v <= 0 {
        4096
    } else {
        v as u64
    }
}

/// `statfs` magic of tmpfs (memfds live there too) and hugetlbfs.
const TMPFS_MAGIC: u64 = 0x0102_1994;
const HUGETLBFS_MAGIC: u64 = 0x9584_58f6;

/// Whether `file` is open for reading, and for writing if `writable`, without `O_APPEND`
/// (with which Linux `pwrite` ignores the offset and appends: the file would grow with
/// every device write).
fn check_access(file: &File, writable: bool) -> Result<(), MapError> {
    // SAFETY: fcntl on a descriptor we own; F_GETFL takes no argument.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(MapError::Stat(std::io::Error::last_os_error()));
    }
    if flags & libc::O_APPEND != 0 {
        return Err(MapError::Access("positioned writes (it is O_APPEND)"));
    }
    match (flags & libc::O_ACCMODE, writable) {
        (libc::O_RDWR, _) | (libc::O_RDONLY, false) => Ok(()),
        (libc::O_RDONLY, true) => Err(MapError::Access("writing")),
        _ => Err(MapError::Access("reading")),
    }
}

/// Accepts only files whose pages the kernel itself provides. A page fault on a file of a
/// FUSE mount is answered by a user-space daemon (possibly the client), one on NFS by a
/// server: either could stall the device thread inside a memory copy, with the device lock
/// held, for as long as it likes. On tmpfs and hugetlbfs a fault never leaves the kernel.
fn check_file_system(file: &File) -> Result<u64, MapError> {
    // SAFETY: an all-zero statfs is a valid out-parameter.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs fills `st` for a descriptor we own.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return Err(MapError::Stat(std::io::Error::last_os_error()));
    }
    // f_type's C type differs between targets; the magic numbers are 32-bit.
    let magic = (st.f_type as u64) & 0xffff_ffff;
    if magic == TMPFS_MAGIC || magic == HUGETLBFS_MAGIC {
        Ok(magic)
    } else {
        Err(MapError::FileSystem(magic))
    }
}

/// Whether the client can no longer shrink `file`, after trying to make it so.
///
/// Truncating a file that is mapped makes later accesses to the lost pages raise `SIGBUS`,
/// which would end the whole process (every NIC). A memfd sealed with `F_SEAL_SHRINK` (QEMU's
/// `memory-backend-memfd` seals by default) cannot shrink; a memfd that allows sealing but
/// has no such seal yet gets one here (shrinking guest RAM that is mapped for DMA is never
/// legitimate). Other files (tmpfs, hugetlbfs) cannot be sealed: `false`.
pub fn seal_shrink(file: &File) -> bool {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own; F_GET_SEALS takes no pointer argument.
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    if seals < 0 {
        return false;
    }
    if seals & libc::F_SEAL_SHRINK != 0 {
        return true;
    }
    if seals & libc::F_SEAL_SEAL != 0 {
        return false;
    }
    // SAFETY: as above; F_ADD_SEALS takes an integer argument.
    unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) == 0 }
}

impl Mapping {
    /// Gives access to `size` bytes of `file` starting at `offset`; `writable` allows
    /// writes.
    ///
    /// Only regular files on tmpfs or hugetlbfs are accepted (the size of a device file, a
    /// socket or a pipe says nothing about what can be mapped), and the range must lie
    /// inside the file. The file is sealed against shrinking first where possible, so the
    /// size check holds; a sealed file is `mmap`ed. A tmpfs file that cannot be sealed is
    /// reached with `pread`/`pwrite`, so a later truncation fails accesses instead of
    /// raising `SIGBUS`. hugetlbfs has no `write()`: an unsealable hugetlbfs file is
    /// `mmap`ed anyway, and a warning says a truncation would end the process.
    pub fn new(file: &File, offset: u64, size: u64, writable: bool) -> Result<Self, MapError> {
        if size == 0 {
            return Err(MapError::Empty);
        }
        let end = offset
            .checked_add(size)
            .ok_or(MapError::Overflow { offset, size })?;
        let meta = file.metadata().map_err(MapError::Stat)?;
        if !meta.file_type().is_file() {
            return Err(MapError::NotRegular);
        }
        let magic = check_file_system(file)?;
        check_access(file, writable)?;
        // Seal before reading the size, so a truncation cannot slip in between.
        let sealed = seal_shrink(file);
        let meta = file.metadata().map_err(MapError::Stat)?;
        if end > meta.len() {
            return Err(MapError::BeyondFile {
                offset,
                size,
                file_size: meta.len(),
            });
        }
        let page = page_size();
        let slack = offset % page;
        let map_offset = offset - slack;
        let map_len = size
            .checked_add(slack)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or(MapError::TooLarge(size))?;
        let size_usize = usize::try_from(size).map_err(|_| MapError::TooLarge(size))?;
        if !sealed && magic == TMPFS_MAGIC {
            let file = file.try_clone().map_err(MapError::Dup)?;
            return Ok(Self {
                backing: Backing::FileIo { file, offset },
                size: size_usize,
                writable,
            });
        }
        if !sealed {
            log::warn!(
                "DMA fd range {offset:#x}+{size:#x}: a hugetlbfs file that cannot be sealed \
                 is mapped; if the client truncates it, a device access raises SIGBUS and \
                 ends the process"
            );
        }
        let file_offset =
            libc::off_t::try_from(map_offset).map_err(|_| MapError::Overflow { offset, size })?;
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping at an address chosen by the kernel; it aliases no
        // Rust object. All arguments were validated above.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                file_offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(MapError::Mmap(std::io::Error::last_os_error()));
        }
        let base = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| MapError::Mmap(std::io::Error::other("mmap returned NULL")))?;
        Ok(Self {
            backing: Backing::Mmap {
                base,
                map_len,
                slack: slack as usize,
            },
            size: size_usize,
            writable,
        })
    }

    /// Whether accesses go through `mmap` (rather than `pread`/`pwrite`).
    pub fn is_mmap(&self) -> bool {
        matches!(self.backing, Backing::Mmap { .. })
    }

    /// Usable size in bytes.
    pub fn len(&self) -> u64 {
        self.size as u64
    }

    /// Whether the mapping is empty (never true: empty mappings are refused).
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Whether the mapping was created writable.
    pub fn writable(&self) -> bool {
        self.writable
    }

    fn check(&self, offset: u64, len: usize) -> Result<usize, AccessError> {
        let oob = AccessError::OutOfBounds {
            offset,
            len: len as u64,
            size: self.size as u64,
        };
        let start = usize::try_from(offset).map_err(|_| oob)?;
        let end = start.checked_add(len).ok_or(oob)?;
        if end > self.size {
            return Err(oob);
        }
        Ok(start)
    }

    /// Copies `buf.len()` bytes at `offset` out of the mapping.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), AccessError> {
        let start = self.check(offset, buf.len())?;
        match &self.backing {
            // SAFETY: `slack + start + buf.len() <= slack + size <= map_len` (checked
            // above), so the source lies inside our live mapping; `buf` is a distinct Rust
            // buffer.
            Backing::Mmap { base, slack, .. } => unsafe {
                let src = base.as_ptr().add(slack + start);
                std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len());
            },
            // `base + start` cannot overflow: `base + size` was checked at creation.
            Backing::FileIo { file, offset: base } => file
                .read_exact_at(buf, base + start as u64)
                .map_err(|_| AccessError::Unavailable)?,
        }
        Ok(())
    }

    /// Copies `data` into the mapping at `offset`. A read-only mapping refuses the write
    /// rather than faulting.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), AccessError> {
        let start = self.check(offset, data.len())?;
        if !self.writable {
            return Err(AccessError::ReadOnly);
        }
        match &self.backing {
            // SAFETY: bounds checked as in `read_at`; the mapping is PROT_WRITE.
            Backing::Mmap { base, slack, .. } => unsafe {
                let dst = base.as_ptr().add(slack + start);
                std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len());
            },
            // Past a truncation this re-grows the file, at most to the mapped range.
            Backing::FileIo { file, offset: base } => file
                .write_all_at(data, base + start as u64)
                .map_err(|_| AccessError::Unavailable)?,
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        let Backing::Mmap { base, map_len, .. } = &self.backing else {
            return;
        };
        // SAFETY: `base`/`map_len` are exactly what mmap returned and nothing else unmaps it.
        let rc = unsafe { libc::munmap(base.as_ptr().cast(), *map_len) };
        if rc != 0 {
            log::warn!("munmap failed: {}", std::io::Error::last_os_error());
        }
    }
}

#[cfg(test)]
pub(crate) mod test_util {
    use std::ffi::CString;
    use std::fs::File;
    use std::os::fd::FromRawFd;

    /// Creates a memfd of `size` bytes (zero-filled) for tests. Like QEMU's, it can be
    /// sealed (the device seals it against shrinking and maps it).
    pub fn memfd(size: u64) -> File {
        memfd_with(size, libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
    }

    /// A memfd that cannot be sealed (QEMU's `seal=off`): the device reaches it with
    /// `pread`/`pwrite`.
    pub fn unsealable_memfd(size: u64) -> File {
        memfd_with(size, libc::MFD_CLOEXEC)
    }

    fn memfd_with(size: u64, flags: libc::c_uint) -> File {
        let name = CString::new("ferrdma-test").expect("static name");
        // SAFETY: memfd_create with a valid C string; the returned fd is owned by the File.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: fd is a fresh, owned descriptor.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(size).expect("set_len");
        file
    }

    /// A pipe (read end, write end) for tests that need an fd which is not a regular file.
    pub fn pipe() -> (File, File) {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills the two-element array on success.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
        assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
        // SAFETY: fresh owned descriptors.
        unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
    }
}

#[cfg(test)]
mod tests {
    use super::test_util::memfd;
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn reads_and_writes_through_to_the_file() {
        let f = memfd(8192);
        f.write_all_at(b"hello", 4096 + 10).unwrap();
        let m = Mapping::new(&f, 4096, 4096, true).unwrap();
        let mut buf = [0u8; 5];
        m.read_at(10, &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        m.write_at(4091, b"WORLD").unwrap();
        let mut back = [0u8; 5];
        f.read_exact_at(&mut back, 4096 + 4091).unwrap();
        assert_eq!(&back, b"WORLD");
    }

    #[test]
    fn unaligned_file_offset_is_honoured() {
        let f = memfd(8192);
        f.write_all_at(b"xyz", 100).unwrap();
        let m = Mapping::new(&f, 100, 50, false).unwrap();
        let mut buf = [0u8; 3];
        m.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"xyz");
        assert!(
            m.write_at(0, b"a").is_err(),
            "read-only mapping must refuse writes"
        );
    }

    #[test]
    fn bounds_are_enforced() {
        let f = memfd(4096);
        let m = Mapping::new(&f, 0, 4096, true).unwrap();
        let mut buf = [0u8; 2];
        assert!(m.read_at(4095, &mut buf).is_err());
        assert!(m.read_at(u64::MAX, &mut buf).is_err());
        assert!(
            m.write_at(4096, &[]).is_ok(),
            "empty access at the end is in bounds"
        );
        assert!(m.write_at(4097, &[]).is_err());
        assert!(m.read_at(4094, &mut buf).is_ok());
    }

    #[test]
    fn refuses_bad_ranges() {
        let f = memfd(4096);
        assert!(matches!(Mapping::new(&f, 0, 0, true), Err(MapError::Empty)));
        assert!(matches!(
            Mapping::new(&f, 0, 8192, true),
            Err(MapError::BeyondFile { .. })
        ));
        assert!(matches!(
            Mapping::new(&f, u64::MAX, 2, true),
            Err(MapError::Overflow { .. })
        ));
        // A pipe has no size that bounds a mapping: refused before mmap.
        let (r, _w) = test_util::pipe();
        assert!(matches!(
            Mapping::new(&r, 0, 4096, false),
            Err(MapError::NotRegular)
        ));
    }

    #[test]
    fn a_file_the_client_can_truncate_is_reached_without_mmap() {
        let f = test_util::unsealable_memfd(3 * 4096);
        f.write_all_at(b"abc", 4096 + 100).unwrap();
        let m = Mapping::new(&f, 4096 + 100, 4096, true).unwrap();
        assert!(!m.is_mmap());
        let mut buf = [0u8; 3];
        m.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"abc");
        m.write_at(4093, b"xyz").unwrap();
        let mut back = [0u8; 3];
        f.read_exact_at(&mut back, 4096 + 100 + 4093).unwrap();
        assert_eq!(&back, b"xyz");
        assert!(m.read_at(4094, &mut buf).is_err(), "bounds still apply");
        // The client truncates the file under the device: accesses fail, no SIGBUS.
        f.set_len(0).unwrap();
        assert_eq!(m.read_at(0, &mut buf), Err(AccessError::Unavailable));
        // A write re-grows the file, at most to the end of the mapped range.
        m.write_at(4093, b"xyz").unwrap();
        assert_eq!(f.metadata().unwrap().len(), 4096 + 100 + 4096);
        // A sealable memfd is sealed and mapped.
        let g = memfd(4096);
        assert!(Mapping::new(&g, 0, 4096, true).unwrap().is_mmap());
        assert!(g.set_len(0).is_err());
    }

    #[test]
    fn fds_without_the_needed_access_or_with_o_append_are_refused() {
        let f = test_util::unsealable_memfd(4096);
        let path = format!("/proc/self/fd/{}", f.as_raw_fd());
        let ro = File::open(&path).unwrap();
        assert!(matches!(
            Mapping::new(&ro, 0, 4096, true),
            Err(MapError::Access("writing"))
        ));
        assert!(Mapping::new(&ro, 0, 4096, false).is_ok());
        let wo = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        assert!(matches!(
            Mapping::new(&wo, 0, 4096, true),
            Err(MapError::Access("reading"))
        ));
        let app = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .open(&path)
            .unwrap();
        assert!(matches!(
            Mapping::new(&app, 0, 4096, true),
            Err(MapError::Access(_))
        ));
    }

    #[test]
    fn only_tmpfs_and_hugetlbfs_files_are_mapped() {
        // A file where the crate is built: accepted only if that happens to be tmpfs.
        let path = std::env::current_dir()
            .unwrap()
            .join(format!("target-fs-check-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let _ = std::fs::remove_file(&path);
        f.set_len(4096).unwrap();
        let on_tmpfs = check_file_system(&f).is_ok();
        let r = Mapping::new(&f, 0, 4096, true);
        assert_eq!(r.is_ok(), on_tmpfs, "{:?}", r.err());
        if !on_tmpfs {
            assert!(matches!(r, Err(MapError::FileSystem(_))));
        }
        // A memfd lives on tmpfs.
        assert!(check_file_system(&memfd(4096)).is_ok());
    }

    #[test]
    fn shrink_seal_is_added_where_the_memfd_allows_it() {
        use std::ffi::CString;
        use std::os::fd::FromRawFd;
        // Without MFD_ALLOW_SEALING (F_SEAL_SEAL is set) a memfd cannot be sealed.
        assert!(!seal_shrink(&test_util::unsealable_memfd(4096)));
        let name = CString::new("ferrdma-seal").unwrap();
        // SAFETY: memfd_create with a valid C string; the fd is owned by the File.
        let fd = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        assert!(fd >= 0);
        // SAFETY: fresh owned descriptor.
        let f = unsafe { File::from_raw_fd(fd) };
        f.set_len(8192).unwrap();
        assert!(seal_shrink(&f));
        assert!(
            f.set_len(4096).is_err(),
            "the client can no longer shrink it"
        );
        assert!(seal_shrink(&f), "idempotent");
    }
}
