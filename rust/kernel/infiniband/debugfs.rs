// SPDX-License-Identifier: GPL-2.0

//! A device's tunable parameters as debugfs files (`<debugfs>/<driver>/<parent>/<group>/<name>`),
//! as mlx5 shows its congestion control parameters in `cc_params`.
//!
//! C header: [`include/linux/debugfs.h`](srctree/include/linux/debugfs.h).
//!
//! ib_core asks new drivers not to add sysfs attributes (`device_group`) and has no debugfs of
//! its own, so the directory is the driver's: `<debugfs>/<driver>/` is shared by the driver's
//! devices and outlives them (an empty directory stays after the module is gone and is found
//! again when it comes back), each device gets a directory named after its parent (the PCI
//! function, stable across renames of the ib_device). Each file reads as a decimal number and
//! line feed and takes one decimal number; [`Driver::read_param`] and [`Driver::write_param`]
//! do the work. Like all of debugfs this is for developers and root only: failures to create
//! the files are not errors.

use super::{device::Device, Driver};
use crate::{
    bindings,
    error::from_err_ptr,
    ffi::{c_char, c_void},
    prelude::*,
    str::CStrExt,
    uaccess::{UserPtr, UserSlice},
};
use core::marker::PhantomData;

/// One parameter file.
pub struct DebugfsParam {
    /// The subdirectory it is in, e.g. `c"cc_params"`.
    pub group: &'static CStr,
    /// Its name.
    pub name: &'static CStr,
    /// Whether root may write it (mode 0644, else 0444).
    pub writable: bool,
}

/// The longest value a write takes: `u32::MAX` in decimal, a line feed and room for spaces.
const MAX_WRITE: usize = 24;

/// The files of one device, with what their handlers need.
///
/// # Invariants
///
/// - `dir` is the device's directory (an error pointer if debugfs refused it), removed with
///   everything below it before `files` is freed.
/// - `files` is never resized after the files are created: each file's private data points
///   to its entry.
/// - `files[i].ib` is the `ib_device` of a registered `Device<T>` whose registration data is
///   valid while the files exist.
pub(crate) struct DeviceParams<T: Driver> {
    dir: *mut bindings::dentry,
    files: KVec<ParamFile>,
    _t: PhantomData<T>,
}

/// What a file's handlers receive as its private data.
struct ParamFile {
    ib: *mut bindings::ib_device,
    index: usize,
}

// SAFETY: The pointers are only used by the handlers, which debugfs may run on any thread;
// the device they point to is shared (`Device<T>` is `Sync`).
unsafe impl<T: Driver> Send for DeviceParams<T> {}
// SAFETY: See `Send`; `&DeviceParams` gives access to nothing.
unsafe impl<T: Driver> Sync for DeviceParams<T> {}

impl<T: Driver> DeviceParams<T> {
    /// Creates the files of [`Driver::DEBUGFS_PARAMS`] for `dev`, named `<root>/<dev_name>/`.
    ///
    /// # Safety
    ///
    /// `dev` is registered and its registration data valid until the result is dropped.
    pub(crate) unsafe fn new(
        dev: &Device<T>,
        root: &CStr,
        dev_name: *const c_char,
    ) -> Result<Self> {
        let params = T::DEBUGFS_PARAMS;
        let mut files = KVec::with_capacity(params.len(), GFP_KERNEL)?;
        for index in 0..params.len() {
            files.push(
                ParamFile {
                    ib: dev.as_raw(),
                    index,
                },
                GFP_KERNEL,
            )?;
        }
        // INVARIANT: The files are created below, after `files` took its final size.
        let mut this = Self {
            dir: core::ptr::null_mut(),
            files,
            _t: PhantomData,
        };
        if !params.is_empty() {
            // SAFETY: By the function contract.
            unsafe { this.create_files(root, dev_name) };
        }
        Ok(this)
    }

    /// Without debugfs there is nothing to create.
    ///
    /// # Safety
    ///
    /// As for [`DeviceParams::new`].
    #[cfg(not(CONFIG_DEBUG_FS))]
    unsafe fn create_files(&mut self, _root: &CStr, _dev_name: *const c_char) {}

    /// Makes the directories and the files.
    ///
    /// # Safety
    ///
    /// As for [`DeviceParams::new`]; called once, with `files` at its final size.
    #[cfg(CONFIG_DEBUG_FS)]
    unsafe fn create_files(&mut self, root: &CStr, dev_name: *const c_char) {
        let params = T::DEBUGFS_PARAMS;
        // SAFETY: `root` is a NUL-terminated name; `dev_name` one that lives as long as the
        // call (the parent's name, by the caller).
        self.dir = unsafe { make_device_dir(root, dev_name) };
        let this = &*self;
        let mut group_dir: Option<(&CStr, *mut bindings::dentry)> = None;
        for (p, f) in params.iter().zip(this.files.iter()) {
            let parent = match group_dir {
                Some((g, d)) if g == p.group => d,
                _ => {
                    // SAFETY: `p.group` is NUL-terminated; `this.dir` is a directory or an
                    // error pointer, which debugfs passes through.
                    let d =
                        unsafe { bindings::debugfs_create_dir(p.group.as_char_ptr(), this.dir) };
                    group_dir = Some((p.group, d));
                    d
                }
            };
            let mode: bindings::umode_t = if p.writable { 0o644 } else { 0o444 };
            // SAFETY: `f` lives until `this.dir` is removed (type invariants); `FOPS` is
            // static and its handlers take a `ParamFile` of a `Device<T>` as private data.
            unsafe {
                bindings::debugfs_create_file_full(
                    p.name.as_char_ptr(),
                    mode,
                    parent,
                    core::ptr::from_ref(f).cast_mut().cast::<c_void>(),
                    core::ptr::null(),
                    &ParamOps::<T>::FOPS,
                )
            };
        }
    }
}

impl<T: Driver> Drop for DeviceParams<T> {
    fn drop(&mut self) {
        #[cfg(CONFIG_DEBUG_FS)]
        // SAFETY: `dir` is ours (or null or an error pointer, which it ignores); it removes
        // the files and waits for handlers still running on them, so none touches `files`
        // or the device afterwards.
        unsafe {
            bindings::debugfs_remove(self.dir)
        };
    }
}

/// Finds or makes `<debugfs>/<root>/` and makes `<dev_name>/` in it.
#[cfg(CONFIG_DEBUG_FS)]
///
/// # Safety
///
/// `dev_name` points to a NUL-terminated string valid for the call.
unsafe fn make_device_dir(root: &CStr, dev_name: *const c_char) -> *mut bindings::dentry {
    // SAFETY: `root` is NUL-terminated; a null parent is the debugfs root. A found directory
    // comes with a reference.
    let mut found = unsafe { bindings::debugfs_lookup(root.as_char_ptr(), core::ptr::null_mut()) };
    if found.is_null() {
        // SAFETY: As above.
        let made =
            unsafe { bindings::debugfs_create_dir(root.as_char_ptr(), core::ptr::null_mut()) };
        if from_err_ptr(made).is_ok() {
            // SAFETY: `made` is a directory; the name is `dev_name` (function contract).
            return unsafe { bindings::debugfs_create_dir(dev_name, made) };
        }
        // Another device of the driver made it in between.
        // SAFETY: As above.
        found = unsafe { bindings::debugfs_lookup(root.as_char_ptr(), core::ptr::null_mut()) };
        if found.is_null() {
            return made;
        }
    }
    // SAFETY: `found` is a live directory we hold a reference to; the name is `dev_name`.
    let dir = unsafe { bindings::debugfs_create_dir(dev_name, found) };
    // SAFETY: The reference `debugfs_lookup` took; the directory stays in debugfs.
    unsafe { bindings::dput(found) };
    dir
}

/// The value as a file shows it: decimal and a line feed.
fn format_value(v: u32, out: &mut [u8; 12]) -> usize {
    let mut digits = [0u8; 10];
    let (mut n, mut v) = (0, v);
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in 0..n {
        out[i] = digits[n - 1 - i];
    }
    out[n] = b'\n';
    n + 1
}

/// A written value: one decimal number of at most 10 digits that fits in a `u32`, with
/// surrounding white space (`echo` adds a line feed); no sign, no other base.
fn parse_value(b: &[u8]) -> Result<u32> {
    let s = b.trim_ascii();
    if s.is_empty() || s.len() > 10 || !s.iter().all(u8::is_ascii_digit) {
        return Err(EINVAL);
    }
    let v = s.iter().fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
    u32::try_from(v).map_err(|_| EINVAL)
}

/// The file operations of driver `T`'s parameter files.
#[cfg_attr(not(CONFIG_DEBUG_FS), allow(dead_code))]
struct ParamOps<T: Driver>(PhantomData<T>);

impl<T: Driver> ParamOps<T> {
    const FOPS: bindings::file_operations = bindings::file_operations {
        open: Some(bindings::simple_open),
        read: Some(Self::read),
        write: Some(Self::write),
        llseek: Some(bindings::default_llseek),
        // SAFETY: All other members may be zero (no handler).
        ..unsafe { core::mem::zeroed() }
    };

    /// The `ParamFile` of an open file.
    ///
    /// # Safety
    ///
    /// `file` is an open parameter file of driver `T` (`simple_open` copied its private
    /// data, a `ParamFile`, which lives while debugfs lets the handler run).
    unsafe fn param<'a>(file: *mut bindings::file) -> &'a ParamFile {
        // SAFETY: By the function contract.
        unsafe { &*(*file).private_data.cast::<ParamFile>() }
    }

    /// `read`: the value, read from the device at offset 0 and again at every read that
    /// starts there.
    ///
    /// # Safety
    ///
    /// Called by debugfs for an open parameter file of driver `T`.
    unsafe extern "C" fn read(
        file: *mut bindings::file,
        buf: *mut c_char,
        count: usize,
        ppos: *mut bindings::loff_t,
    ) -> isize {
        // SAFETY: By the function contract.
        let p = unsafe { Self::param(file) };
        // SAFETY: `ppos` is the file position debugfs passes with the call.
        let pos = unsafe { *ppos };
        let r = (|| -> Result<usize> {
            // SAFETY: `p.ib` is a registered `Device<T>` (type invariant of `DeviceParams`).
            let dev = unsafe { Device::<T>::from_raw(p.ib) };
            // SAFETY: The files exist only while the registration data is valid.
            let v = unsafe { dev.with_data(|d| T::read_param(d, p.index)) }?;
            let mut text = [0u8; 12];
            let len = format_value(v, &mut text);
            let start = usize::try_from(pos).map_err(|_| EINVAL)?;
            let Some(rest) = text[..len].get(start..) else {
                return Ok(0);
            };
            let n = rest.len().min(count);
            UserSlice::new(UserPtr::from_ptr(buf.cast()), count)
                .writer()
                .write_slice(&rest[..n])?;
            Ok(n)
        })();
        match r {
            Ok(n) => {
                // SAFETY: As above; `n` is at most 12.
                unsafe { *ppos = pos + n as bindings::loff_t };
                n as isize
            }
            Err(e) => e.to_errno() as isize,
        }
    }

    /// `write`: one value, in one write at offset 0.
    ///
    /// # Safety
    ///
    /// Called by debugfs for an open parameter file of driver `T`.
    unsafe extern "C" fn write(
        file: *mut bindings::file,
        buf: *const c_char,
        count: usize,
        ppos: *mut bindings::loff_t,
    ) -> isize {
        // SAFETY: By the function contract.
        let p = unsafe { Self::param(file) };
        // SAFETY: `ppos` is the file position debugfs passes with the call.
        let pos = unsafe { *ppos };
        let r = (|| -> Result {
            if pos != 0 || count == 0 || count > MAX_WRITE {
                return Err(EINVAL);
            }
            let mut text = [0u8; MAX_WRITE];
            UserSlice::new(UserPtr::from_ptr(buf.cast_mut().cast()), count)
                .reader()
                .read_slice(&mut text[..count])?;
            let v = parse_value(&text[..count])?;
            // SAFETY: `p.ib` is a registered `Device<T>` (type invariant of `DeviceParams`).
            let dev = unsafe { Device::<T>::from_raw(p.ib) };
            // SAFETY: The files exist only while the registration data is valid.
            unsafe { dev.with_data(|d| T::write_param(d, p.index, v)) }
        })();
        match r {
            Ok(()) => {
                // SAFETY: As above.
                unsafe { *ppos = count as bindings::loff_t };
                count as isize
            }
            Err(e) => e.to_errno() as isize,
        }
    }
}

#[macros::kunit_tests(rust_infiniband_debugfs)]
mod tests {
    use super::*;

    fn shows(v: u32, want: &[u8]) -> bool {
        let mut t = [0u8; 12];
        let n = format_value(v, &mut t);
        &t[..n] == want
    }

    #[test]
    fn values_read_as_decimal_lines() {
        assert!(shows(0, b"0\n"));
        assert!(shows(7, b"7\n"));
        assert!(shows(1020, b"1020\n"));
        assert!(shows(u32::MAX, b"4294967295\n"));
    }

    #[test]
    fn writes_take_one_unsigned_decimal() {
        assert_eq!(parse_value(b"40\n"), Ok(40));
        assert_eq!(parse_value(b"  0 "), Ok(0));
        assert_eq!(parse_value(b"4294967295"), Ok(u32::MAX));
        let bad: [&[u8]; 10] = [
            b"",
            b"\n",
            b"4294967296",
            b"99999999999",
            b"+5",
            b"-1",
            b"0x10",
            b"1 2",
            b"12a",
            b"\x00",
        ];
        for b in bad {
            assert_eq!(parse_value(b), Err(EINVAL));
        }
    }
}
