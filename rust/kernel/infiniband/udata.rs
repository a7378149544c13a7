// SPDX-License-Identifier: GPL-2.0

//! Driver-specific data of uverbs commands (`struct ib_udata`).
//!
//! Provider ABIs grow by appending fields, so both directions are tolerant the way rdma-core
//! expects: a request shorter than the driver's struct reads as zero-extended, and a response
//! is cut to the length user space offered. A request longer than the driver's struct must
//! have only zeros past it (as `ib_is_udata_cleared` checks in C drivers): a newer library
//! asking for something this driver does not know gets `EOPNOTSUPP`, not silence.

use crate::{
    bindings,
    prelude::*,
    uaccess::{UserPtr, UserSlice},
};

/// The driver data of one uverbs command.
///
/// # Invariants
///
/// `raw` is a valid `ib_udata` whose buffers are user addresses of `inlen`/`outlen` bytes.
pub struct UData<'a> {
    raw: &'a mut bindings::ib_udata,
}

impl<'a> UData<'a> {
    /// Wraps a raw pointer; `None` for kernel callers, which pass no udata.
    ///
    /// # Safety
    ///
    /// `ptr` is null or a valid `ib_udata` that outlives `'a` and is not otherwise accessed.
    pub(crate) unsafe fn from_raw(ptr: *mut bindings::ib_udata) -> Option<Self> {
        // SAFETY: Guaranteed by the caller.
        unsafe { ptr.as_mut() }.map(|raw| Self { raw })
    }

    /// Bytes of request user space sent.
    pub fn inlen(&self) -> usize {
        self.raw.inlen
    }

    /// Bytes of response user space accepts.
    pub fn outlen(&self) -> usize {
        self.raw.outlen
    }

    /// Reads the request into `out`: `min(inlen, out.len())` bytes are copied and the rest of
    /// `out` is zeroed. Request bytes past `out` must all be zero (else `EOPNOTSUPP`). Returns
    /// how many bytes user space sent.
    pub fn read_in(&self, out: &mut [u8]) -> Result<usize> {
        let mut reader =
            UserSlice::new(UserPtr::from_ptr(self.raw.inbuf.cast_mut()), self.inlen()).reader();
        let n = self.inlen().min(out.len());
        out.fill(0);
        reader.read_slice(&mut out[..n])?;
        let mut chunk = [0u8; 64];
        while !reader.is_empty() {
            let k = reader.len().min(chunk.len());
            reader.read_slice(&mut chunk[..k])?;
            if chunk[..k].iter().any(|&b| b != 0) {
                return Err(EOPNOTSUPP);
            }
        }
        Ok(self.inlen())
    }

    /// Writes the response: `min(outlen, data.len())` bytes of `data`.
    pub fn respond(&mut self, data: &[u8]) -> Result {
        let n = self.outlen().min(data.len());
        if n > 0 {
            let mut writer = UserSlice::new(UserPtr::from_ptr(self.raw.outbuf), n).writer();
            writer.write_slice(&data[..n])?;
        }
        Ok(())
    }
}
