// SPDX-License-Identifier: GPL-2.0

//! Binding an RDMA port to the network device with the same MAC address (the function's own
//! device, never a VLAN, bridge or bond device stacked on it).
//!
//! RoCE GIDs come from the IP addresses of the port's network device, and rdma_cm finds the RDMA
//! device through them, so the port must follow its network device: bound when a device with
//! the MAC registers (or an existing one is found at registration: the notifier replays
//! `NETDEV_REGISTER` for every existing device), rebound when addresses change, and unbound on
//! `NETDEV_UNREGISTER`, as `ib_device_set_netdev()` requires. The bound device's link state
//! (up and with a carrier, as `ib_get_curr_port_state()` sees it) is passed on to the provider
//! (`on_link`) whenever it may have changed: on a converged NIC the RDMA port shares the
//! Ethernet port, so taking the interface down or losing the carrier (a pulled cable) takes
//! the RDMA link down too. ib_core itself reports the port events (`IB_EVENT_PORT_ERR`,
//! `IB_EVENT_PORT_ACTIVE`) from the same netdev notifications.

use crate::ffi::{c_int, c_void};
use crate::{bindings, error::to_result, prelude::*, types::Opaque};

/// A netdevice notifier that keeps port `port` of `ib` bound to the device whose MAC is `mac`.
///
/// # Invariants
///
/// `ib` points to an allocated `ib_device` that outlives the registration of `nb`.
#[pin_data]
pub(crate) struct NetdevBinding {
    #[pin]
    nb: Opaque<bindings::notifier_block>,
    ib: *mut bindings::ib_device,
    port: u32,
    mac: [u8; 6],
    on_link: LinkFn,
}

/// Called with the device and whether the bound network device is up, under RTNL.
///
/// # Safety
///
/// Only called with the `ib_device` of the binding, while its registration data is valid.
pub(crate) type LinkFn = unsafe fn(*mut bindings::ib_device, bool);

// SAFETY: The notifier callback runs under RTNL; `ib` is only passed to thread-safe ib_core calls.
unsafe impl Send for NetdevBinding {}
// SAFETY: See `Send`.
unsafe impl Sync for NetdevBinding {}

impl NetdevBinding {
    /// Creates an unregistered binding.
    pub(crate) fn new(
        ib: *mut bindings::ib_device,
        port: u32,
        mac: [u8; 6],
        on_link: LinkFn,
    ) -> impl PinInit<Self> {
        pin_init!(Self {
            // SAFETY: An all-zero `notifier_block` is valid; the callback is set in `register`.
            nb <- Opaque::ffi_init(|nb: *mut bindings::notifier_block| unsafe {
                nb.write(core::mem::zeroed());
                (*nb).notifier_call = Some(Self::event);
            }),
            ib,
            port,
            mac,
            on_link,
        })
    }

    /// Registers the notifier; existing network devices are replayed to it.
    pub(crate) fn register(self: Pin<&Self>) -> Result {
        // SAFETY: `nb` is pinned and stays valid until `unregister`.
        to_result(unsafe { bindings::register_netdevice_notifier(self.nb.get()) })
    }

    /// Unregisters the notifier; no callback runs after this returns.
    pub(crate) fn unregister(self: Pin<&Self>) {
        // SAFETY: `nb` was registered by `register`.
        unsafe { bindings::unregister_netdevice_notifier(self.nb.get()) };
    }

    /// Whether `ndev` is the port's own network device: an Ethernet device with the MAC that
    /// belongs to a bus device. Stacked devices take their lower device's MAC (a VLAN device
    /// always, a bridge or bond often) but have no parent; binding to one would move the
    /// port off its function and lose the untagged GIDs. ib_core gives the port the GIDs of
    /// the VLAN devices above its own device anyway.
    fn matches(&self, ndev: *mut bindings::net_device) -> bool {
        // SAFETY: The notifier gets a valid net_device; RTNL keeps its address stable.
        unsafe {
            (*ndev).type_ == bindings::ARPHRD_ETHER as u16
                && !(*ndev).dev.parent.is_null()
                && usize::from((*ndev).addr_len) == self.mac.len()
                && !(*ndev).dev_addr.is_null()
                && core::slice::from_raw_parts((*ndev).dev_addr, self.mac.len()) == self.mac
        }
    }

    /// Whether `ndev` is the device port `port` is bound to now.
    fn is_bound_to(&self, ndev: *mut bindings::net_device) -> bool {
        // SAFETY: `ib` is valid (type invariant); a non-null result holds a reference.
        let cur = unsafe { bindings::ib_device_get_netdev(self.ib, self.port) };
        if cur.is_null() {
            return false;
        }
        // SAFETY: `cur` holds a reference taken just above.
        unsafe { bindings::dev_put(cur) };
        core::ptr::eq(cur, ndev)
    }

    fn set(&self, ndev: *mut bindings::net_device) {
        // SAFETY: `ib` is valid; `ndev` is null or a registered device (we run under RTNL in
        // its notifier chain, before it unregisters).
        let ret = unsafe { bindings::ib_device_set_netdev(self.ib, ndev, self.port) };
        if ret != 0 {
            pr_warn!("ib_device_set_netdev failed: {}\n", ret);
        }
    }

    unsafe extern "C" fn event(
        nb: *mut bindings::notifier_block,
        event: crate::ffi::c_ulong,
        ptr: *mut c_void,
    ) -> c_int {
        // SAFETY: `nb` is the `nb` field of a `NetdevBinding` (only `new` installs this callback).
        let this = unsafe { &*crate::container_of!(Opaque::cast_from(nb), Self, nb) };
        // SAFETY: netdevice notifiers are passed a `netdev_notifier_info`.
        let ndev = unsafe { bindings::netdev_notifier_info_to_dev(ptr.cast()) };
        if ndev.is_null() {
            return bindings::NOTIFY_DONE as c_int;
        }
        match event as u32 {
            bindings::netdev_cmd_NETDEV_REGISTER | bindings::netdev_cmd_NETDEV_CHANGEADDR => {
                if this.matches(ndev) {
                    this.set(ndev);
                    // SAFETY: The binding's device; the notifier is unregistered before the
                    // registration data goes. `ndev` is valid in its notifier call.
                    unsafe { (this.on_link)(this.ib, link_up(ndev)) };
                } else if this.is_bound_to(ndev) {
                    this.set(core::ptr::null_mut());
                }
            }
            // NETDEV_CHANGE: the carrier came or went (among other flag changes).
            bindings::netdev_cmd_NETDEV_UP
            | bindings::netdev_cmd_NETDEV_DOWN
            | bindings::netdev_cmd_NETDEV_CHANGE => {
                if this.is_bound_to(ndev) {
                    // SAFETY: As above.
                    unsafe { (this.on_link)(this.ib, link_up(ndev)) };
                }
            }
            bindings::netdev_cmd_NETDEV_UNREGISTER => {
                if this.is_bound_to(ndev) {
                    this.set(core::ptr::null_mut());
                }
            }
            _ => {}
        }
        bindings::NOTIFY_DONE as c_int
    }
}

/// Whether `ndev` can carry traffic: administratively up (running) and with a carrier.
///
/// # Safety
///
/// `ndev` must point to a valid `net_device`.
unsafe fn link_up(ndev: *mut bindings::net_device) -> bool {
    // SAFETY: The caller passes a valid device.
    unsafe { bindings::ib_get_curr_port_state(ndev) == bindings::ib_port_state_IB_PORT_ACTIVE }
}
