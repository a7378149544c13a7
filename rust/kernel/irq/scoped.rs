// SPDX-License-Identifier: GPL-2.0

//! IRQ handlers registered for the duration of a closure.
//!
//! [`Registration::new`] is `unsafe` because a registration that is leaked keeps a dangling
//! cookie in the IRQ core. A registration that lives only inside [`with_handler`] cannot be
//! leaked by its user, so registering one is safe. Device self-tests (raise an interrupt, wait
//! for it, tear the handler down again) are the intended users.

use super::{Flags, Handler, IrqRequest, Registration};
use crate::prelude::*;

/// Registers `handler` for `request`, calls `f` with the registered handler, then frees the IRQ.
///
/// `handler` is an initializer; a plain value `v` is passed as `Ok::<_, Error>(v)`.
///
/// The IRQ is freed (waiting for handlers running on other CPUs) before this function returns,
/// whether `f` succeeded or not.
///
/// # Examples
///
/// ```
/// use kernel::irq::{self, IrqRequest, IrqReturn};
/// use kernel::prelude::*;
/// use kernel::sync::atomic::{Atomic, Relaxed};
///
/// struct Counter(Atomic<u32>);
///
/// impl irq::Handler for Counter {
///     fn handle(&self) -> IrqReturn {
///         self.0.fetch_add(1, Relaxed);
///         IrqReturn::Handled
///     }
/// }
///
/// fn count_one(request: IrqRequest<'_>) -> Result<u32> {
///     irq::scoped::with_handler(
///         request,
///         irq::Flags::SHARED,
///         c"example",
///         Ok::<_, Error>(Counter(Atomic::new(0))),
///         |counter| counter.0.load(Relaxed),
///     )
/// }
/// ```
pub fn with_handler<'a, T, R>(
    request: IrqRequest<'a>,
    flags: Flags,
    name: &'static CStr,
    handler: impl PinInit<T, Error> + 'a,
    f: impl FnOnce(&T) -> R,
) -> Result<R>
where
    T: Handler + 'a,
{
    // SAFETY: The registration is owned by this stack frame and dropped before we return; `f`
    // only ever sees a shared reference to the handler, so it cannot leak the registration.
    let registration = KBox::pin_init(
        unsafe { Registration::new(request, flags, name, handler) },
        GFP_KERNEL,
    )?;
    let result = f(registration.handler());
    drop(registration);
    Ok(result)
}
