// SPDX-License-Identifier: GPL-2.0

//! RDMA device allocation, registration and the ops table.

use super::{
    ah::{self, AhObject},
    attr,
    cq::{self, CqObject},
    debugfs::DeviceParams,
    hw_stats,
    irq::{Interrupts, Vectors},
    mcast, mr,
    netdev::NetdevBinding,
    qp::{self, QpObject},
    ucontext::{self, PdObject, UContextData, UContextInit, UContextObject},
    udata::UData,
    wc, wr, DeviceAttr, Driver,
};
use crate::{
    bindings, device,
    error::{from_result, to_result},
    ffi::{c_char, c_int},
    prelude::*,
    str::CStrExt,
    types::Opaque,
    ThisModule,
};
use core::{cell::UnsafeCell, marker::PhantomData, mem::ManuallyDrop, ptr::NonNull};

/// An RDMA device of driver `T` (`struct ib_device`).
///
/// # Invariants
///
/// - `ib` is at offset 0 and was allocated by `_ib_alloc_device()` with the size of `Self`.
/// - `reg_data` is null until the owning [`Registration`] stores a pointer to its data, which
///   stays valid until the device has been unregistered.
#[repr(C)]
pub struct Device<T: Driver> {
    ib: Opaque<bindings::ib_device>,
    reg_data: UnsafeCell<*const T::RegistrationData<'static>>,
}

// SAFETY: The C side synchronises access to the `ib_device`; `reg_data` is written only before
// registration, when the device is not yet shared.
unsafe impl<T: Driver> Send for Device<T> {}
// SAFETY: See `Send`.
unsafe impl<T: Driver> Sync for Device<T> {}

impl<T: Driver> Device<T> {
    /// The device name, e.g. `ferrdma0`.
    pub fn name(&self) -> &CStr {
        // SAFETY: `name` is a NUL-terminated array inside the live `ib_device`; ib_core changes
        // it only on rename, under the device's registration lock.
        unsafe { CStr::from_char_ptr((*self.as_raw()).name.as_ptr()) }
    }

    /// Tells ib_core's clients and every user context (its async event file) that the device
    /// failed: `IB_EVENT_DEVICE_FATAL`. Any context: ib_core delivers it from a work item,
    /// which unregistration waits for. What follows is the driver's business, usually a
    /// reset through [`super::Recovery`].
    pub fn report_fatal(&self) {
        // SAFETY: An all-zero `ib_event` is valid (a union of pointers and a port number).
        let mut ev: bindings::ib_event = unsafe { core::mem::zeroed() };
        ev.device = self.as_raw();
        ev.event = bindings::ib_event_type_IB_EVENT_DEVICE_FATAL;
        ev.element.port_num = 1;
        // SAFETY: `ev` names this live device; ib_dispatch_event() copies the event.
        unsafe { bindings::ib_dispatch_event(&ev) };
    }

    /// Returns the raw `ib_device` pointer.
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_device {
        self.ib.get()
    }

    /// Borrows the device from a raw `ib_device` pointer that ib_core passed to a callback.
    ///
    /// # Safety
    ///
    /// `ptr` must point to the `ib_device` of a live `Device<T>`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::ib_device) -> &'a Self {
        // SAFETY: `ib` is at offset 0 (type invariant), so the cast is to the containing struct.
        unsafe { &*ptr.cast::<Self>() }
    }

    /// Calls `f` with the registration data.
    ///
    /// The higher-ranked closure keeps the erased lifetime from escaping.
    ///
    /// # Safety
    ///
    /// Must only be called from an ib_core callback, which runs between the store of
    /// `reg_data` in [`Registration::new`] and the end of `ib_unregister_device()`.
    pub(crate) unsafe fn with_data<R>(
        &self,
        f: impl for<'a> FnOnce(&'a T::RegistrationData<'a>) -> R,
    ) -> R {
        // SAFETY: By the function's safety requirement the pointer was stored and is valid.
        let data = unsafe { &*(*self.reg_data.get()).cast::<T::RegistrationData<'_>>() };
        f(data)
    }
}

/// Registration parameters of an RDMA device.
pub struct RegistrationParams {
    /// Name pattern, e.g. `c"ferrdma%d"`.
    pub name: &'static CStr,
    /// Node GUID, in host order.
    pub node_guid: u64,
    /// Number of completion vectors.
    pub num_comp_vectors: u32,
    /// The Ethernet MAC of the network device that port 1 is bound to (RoCE GIDs come from
    /// its IP addresses). The binding follows the network device: it is made when a device
    /// with this MAC registers or takes this address, and dropped when it unregisters.
    pub netdev_mac: [u8; 6],
    /// The largest DMA segment the device takes in one scatter/gather element (the length an
    /// SGE can describe). Set as the parent's `max_segment_size` before registering: kernel
    /// ULPs map their scatterlists on the parent (`ib_dma_map_sg`), and the PCI default of
    /// 64 KiB would be exceeded by any merged segment longer than that (DMA-API debug reports
    /// it; the block layer sizes its segments by it).
    pub max_dma_segment: u32,
}

/// A registered RDMA device.
///
/// Dropping it unregisters the device (waiting for every user context to be closed), frees
/// the interrupt handlers, drops the registration data and only then frees the `ib_device`:
/// the data's teardown (e.g. a device reset) still has the device it was made for.
///
/// # Invariants
///
/// `data` is dropped exactly once, in `Drop`, between `ib_unregister_device()` and
/// `ib_dealloc_device()`.
pub struct Registration<'a, T: Driver> {
    dev: NonNull<Device<T>>,
    netdev: Pin<KBox<NetdevBinding>>,
    irqs: Option<Vectors<'a, T>>,
    params: Option<DeviceParams<T>>,
    data: ManuallyDrop<Pin<KBox<T::RegistrationData<'a>>>>,
    _p: PhantomData<&'a ()>,
}

// SAFETY: The registration only hands out shared references to thread-safe data.
unsafe impl<T: Driver> Send for Registration<'_, T> {}
// SAFETY: See `Send`.
unsafe impl<T: Driver> Sync for Registration<'_, T> {}

impl<'a, T: Driver> Registration<'a, T> {
    /// Allocates, binds and registers an RDMA device with one RoCE port under `parent`.
    ///
    /// With `irqs`, a handler is registered on each vector and each interrupt is handed to
    /// [`Driver::handle_irq`] from before the device is registered until after it is
    /// unregistered.
    ///
    /// # Safety
    ///
    /// The returned registration must not be leaked (`mem::forget` or similar): it must be
    /// dropped before `parent` is unbound, as callbacks borrow `data` for `'a`.
    pub unsafe fn new(
        parent: &'a device::Device<device::Bound>,
        module: &'static ThisModule,
        params: RegistrationParams,
        irqs: Option<Interrupts<'a>>,
        data: impl PinInit<T::RegistrationData<'a>, Error>,
    ) -> Result<Self> {
        let data = KBox::pin_init(data, GFP_KERNEL)?;

        // SAFETY: `init_net` is the initial network namespace, valid for the kernel's lifetime;
        // the size covers `Device<T>`, whose `ib_device` is at offset 0.
        let raw = unsafe {
            bindings::_ib_alloc_device(
                core::mem::size_of::<Device<T>>(),
                &raw mut bindings::init_net,
            )
        };
        let dev = NonNull::new(raw.cast::<Device<T>>()).ok_or(ENOMEM)?;
        let guard = AllocGuard(raw);

        // SAFETY: `raw` is a freshly allocated, not yet shared `ib_device`.
        unsafe {
            let ib = &mut *raw;
            ib.node_type = bindings::RDMA_NODE_IB_CA as u8;
            ib.phys_port_cnt = 1;
            ib.num_comp_vectors = c_int::try_from(params.num_comp_vectors)?;
            ib.node_guid = params.node_guid.to_be();
            ib.__bindgen_anon_1.dev.parent = parent.as_raw();
            // Set once, before any consumer can read it (not on every query_device).
            if let Some(k) = T::query_device(&data).local_dma_lkey {
                ib.local_dma_lkey = k;
            }
            let data_ptr: *const T::RegistrationData<'a> = &*data;
            *(*dev.as_ptr()).reg_data.get() = data_ptr.cast();

            let mut ops = VTable::<T>::OPS;
            ops.owner = module.as_ptr();
            // ib_set_device_ops() copies the table, so a stack copy carrying `owner` is fine.
            bindings::ib_set_device_ops(raw, &ops);
        }

        let irqs = match irqs {
            // SAFETY: `reg_data` is set above; the vectors are dropped in `Drop` (or on the
            // error paths below) before `data`.
            Some(i) => Some(unsafe { Vectors::new(i, dev) }?),
            None => None,
        };

        let netdev = KBox::pin_init(
            NetdevBinding::new(raw, 1, params.netdev_mac, Self::netdev_link),
            GFP_KERNEL,
        )?;
        netdev.as_ref().register()?;

        // SAFETY: `parent` is a bound device, so its `dma_parms` are valid; no DMA mapping on it
        // can run concurrently: the device is not registered yet, and the driver maps nothing
        // itself while it registers.
        unsafe { bindings::dma_set_max_seg_size(parent.as_raw(), params.max_dma_segment) };

        // SAFETY: The device is fully set up; `parent` is a bound device, used for DMA mapping.
        to_result(unsafe {
            bindings::ib_register_device(raw, params.name.as_char_ptr(), parent.as_raw())
        })
        .inspect_err(|_| netdev.as_ref().unregister())?;

        core::mem::forget(guard);
        let mut this = Self {
            dev,
            netdev,
            irqs,
            params: None,
            // INVARIANT: Dropped only in `Drop`.
            data: ManuallyDrop::new(data),
            _p: PhantomData,
        };
        // SAFETY: The device is registered; `Drop` removes the files before it unregisters
        // the device and drops the data.
        this.params = Some(unsafe {
            DeviceParams::new(this.device(), T::DEBUGFS_DIR, parent.name().as_char_ptr())
        }?);
        Ok(this)
    }

    /// The bound network device went up or down ([`Driver::netdev_link`]).
    ///
    /// # Safety
    ///
    /// `ib` is the device of a registration whose data is still valid: the netdev notifier
    /// is registered after the data pointer is stored and unregistered before the data is
    /// dropped.
    unsafe fn netdev_link(ib: *mut bindings::ib_device, up: bool) {
        // SAFETY: `ib` belongs to a `Device<T>` (function contract).
        let dev = unsafe { Device::<T>::from_raw(ib) };
        // SAFETY: The data is valid (function contract).
        unsafe { dev.with_data(|d| T::netdev_link(d, up)) };
    }

    /// The registration data.
    pub fn data(&self) -> &T::RegistrationData<'a> {
        &self.data
    }

    /// The registered device.
    pub fn device(&self) -> &Device<T> {
        // SAFETY: The device lives until `self` is dropped.
        unsafe { self.dev.as_ref() }
    }
}

impl<T: Driver> Drop for Registration<'_, T> {
    fn drop(&mut self) {
        let raw = self.device().as_raw();
        // Its handlers reach the data: gone (and finished) first.
        self.params = None;
        // SAFETY: The device was registered in `new`; after this returns no callback runs.
        unsafe { bindings::ib_unregister_device(raw) };
        self.netdev.as_ref().unregister();
        // No handler may run once the data goes.
        self.irqs = None;
        // SAFETY: No callback, notifier or handler can reach the data any more (all are gone
        // above), and it is dropped only here (type invariant).
        unsafe { ManuallyDrop::drop(&mut self.data) };
        // SAFETY: The device is unregistered and nothing references it any more.
        unsafe { bindings::ib_dealloc_device(raw) };
    }
}

/// Frees a device allocated by `_ib_alloc_device()` if registration fails.
struct AllocGuard(*mut bindings::ib_device);

impl Drop for AllocGuard {
    fn drop(&mut self) {
        // SAFETY: The device was allocated and never registered.
        unsafe { bindings::ib_dealloc_device(self.0) };
    }
}

/// `IB_MGMT_MAD_SIZE`: a MAD is 256 bytes (a macro expression bindgen does not evaluate).
const IB_MGMT_MAD_SIZE: u32 = 256;

/// The `ib_device_ops` table of driver `T`.
struct VTable<T: Driver>(PhantomData<T>);

impl<T: Driver> VTable<T> {
    const OPS: bindings::ib_device_ops = bindings::ib_device_ops {
        driver_id: T::DRIVER_ID as u32,
        uverbs_abi_ver: T::UVERBS_ABI_VER,
        query_device: Some(Self::query_device),
        get_dev_fw_str: if T::HAS_FW_VERSION {
            Some(Self::get_dev_fw_str)
        } else {
            None
        },
        query_port: Some(Self::query_port),
        get_port_immutable: Some(Self::get_port_immutable),
        get_link_layer: Some(Self::get_link_layer),
        query_pkey: Some(Self::query_pkey),
        add_gid: Some(Self::add_gid),
        del_gid: Some(Self::del_gid),
        alloc_ucontext: Some(Self::alloc_ucontext),
        dealloc_ucontext: Some(Self::dealloc_ucontext),
        disassociate_ucontext: Some(Self::disassociate_ucontext),
        mmap: Some(ucontext::mmap::<T>),
        mmap_free: Some(ucontext::mmap_free),
        alloc_pd: Some(Self::alloc_pd),
        dealloc_pd: Some(Self::dealloc_pd),
        reg_user_mr: if T::HAS_REG_USER_MR {
            Some(mr::reg_user_mr::<T>)
        } else {
            None
        },
        reg_user_mr_dmabuf: if T::HAS_REG_USER_MR_DMABUF {
            Some(mr::reg_user_mr_dmabuf::<T>)
        } else {
            None
        },
        rereg_user_mr: if T::HAS_REREG_USER_MR {
            Some(mr::rereg_user_mr::<T>)
        } else {
            None
        },
        dereg_mr: if T::HAS_DEREG_MR {
            Some(mr::dereg_mr::<T>)
        } else {
            None
        },
        create_cq: if T::HAS_CREATE_CQ {
            Some(cq::create_cq::<T>)
        } else {
            None
        },
        destroy_cq: if T::HAS_DESTROY_CQ {
            Some(cq::destroy_cq::<T>)
        } else {
            None
        },
        resize_user_cq: if T::HAS_RESIZE_USER_CQ {
            Some(cq::resize_user_cq::<T>)
        } else {
            None
        },
        create_qp: if T::HAS_CREATE_QP {
            Some(qp::create_qp::<T>)
        } else {
            None
        },
        modify_qp: if T::HAS_MODIFY_QP {
            Some(qp::modify_qp::<T>)
        } else {
            None
        },
        query_qp: if T::HAS_QUERY_QP {
            Some(qp::query_qp::<T>)
        } else {
            None
        },
        destroy_qp: if T::HAS_DESTROY_QP {
            Some(qp::destroy_qp::<T>)
        } else {
            None
        },
        create_ah: if T::HAS_CREATE_AH {
            Some(ah::create_ah::<T>)
        } else {
            None
        },
        // User AHs come through their own op; the trampoline serves both.
        create_user_ah: if T::HAS_CREATE_AH {
            Some(ah::create_ah::<T>)
        } else {
            None
        },
        destroy_ah: if T::HAS_DESTROY_AH {
            Some(ah::destroy_ah::<T>)
        } else {
            None
        },
        alloc_hw_port_stats: if T::HAS_PORT_COUNTERS {
            Some(hw_stats::alloc_hw_port_stats::<T>)
        } else {
            None
        },
        get_hw_stats: if T::HAS_PORT_COUNTERS {
            Some(hw_stats::get_hw_stats::<T>)
        } else {
            None
        },
        attach_mcast: if T::HAS_ATTACH_MCAST {
            Some(mcast::attach_mcast::<T>)
        } else {
            None
        },
        detach_mcast: if T::HAS_DETACH_MCAST {
            Some(mcast::detach_mcast::<T>)
        } else {
            None
        },
        query_ah: if T::HAS_QUERY_AH {
            Some(ah::query_ah::<T>)
        } else {
            None
        },
        poll_cq: if T::HAS_POLL_CQ {
            Some(wc::poll_cq::<T>)
        } else {
            None
        },
        req_notify_cq: if T::HAS_REQ_NOTIFY_CQ {
            Some(wc::req_notify_cq::<T>)
        } else {
            None
        },
        post_send: if T::HAS_POST_SEND {
            Some(wr::post_send::<T>)
        } else {
            None
        },
        post_recv: if T::HAS_POST_RECV {
            Some(wr::post_recv::<T>)
        } else {
            None
        },
        get_dma_mr: if T::HAS_GET_DMA_MR {
            Some(mr::get_dma_mr::<T>)
        } else {
            None
        },
        alloc_mr: if T::HAS_ALLOC_MR {
            Some(mr::alloc_mr::<T>)
        } else {
            None
        },
        map_mr_sg: if T::HAS_MR_SET_PAGE {
            Some(mr::map_mr_sg::<T>)
        } else {
            None
        },
        size_ib_ucontext: UContextObject::<T>::SIZE,
        size_ib_pd: PdObject::<T>::SIZE,
        size_ib_cq: CqObject::<T>::SIZE,
        size_ib_qp: QpObject::<T>::SIZE,
        size_ib_ah: AhObject::<T>::SIZE,
        // SAFETY: `ib_device_ops` is a table of integers and nullable pointers.
        ..unsafe { core::mem::zeroed() }
    };

    /// # Safety
    ///
    /// Called by ib_core with a device of driver `T` and a buffer of
    /// `IB_FW_VERSION_NAME_MAX` bytes.
    unsafe extern "C" fn get_dev_fw_str(ib: *mut bindings::ib_device, out: *mut c_char) {
        // SAFETY: `ib` belongs to a `Device<T>` (callback contract).
        let dev = unsafe { Device::<T>::from_raw(ib) };
        // SAFETY: `out` is valid for writes of that many bytes and ours for the call.
        let buf = unsafe {
            core::slice::from_raw_parts_mut(out.cast::<u8>(), attr::IB_FW_VERSION_NAME_MAX)
        };
        // SAFETY: Called from an ib_core callback.
        match unsafe { dev.with_data(|d| T::fw_version(d)) } {
            Some(v) => v.write_str(buf),
            None => buf[0] = 0,
        }
    }

    /// # Safety
    ///
    /// Called by ib_core with a device of driver `T` and valid pointers.
    unsafe extern "C" fn query_device(
        ib: *mut bindings::ib_device,
        out: *mut bindings::ib_device_attr,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `udata` is null or valid (callback contract).
            if let Some(u) = unsafe { udata.as_ref() } {
                if u.inlen != 0 || u.outlen != 0 {
                    return Err(EINVAL);
                }
            }
            // SAFETY: `ib` belongs to a `Device<T>` (callback contract).
            let dev = unsafe { Device::<T>::from_raw(ib) };
            // SAFETY: Called from an ib_core callback.
            let attr: DeviceAttr = unsafe { dev.with_data(|d| T::query_device(d)) };
            // SAFETY: `out` is valid for writes (callback contract).
            attr.write_to(unsafe { &mut *out });
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// Called by ib_core with a zeroed object of `size_ib_ucontext` bytes.
    unsafe extern "C" fn alloc_ucontext(
        uctx: *mut bindings::ib_ucontext,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: ib_core passes the user command's udata, valid for this call.
            let mut udata = unsafe { UData::from_raw(udata) }.ok_or(EINVAL)?;
            // SAFETY: The context's device is a `Device<T>` (callback contract).
            let dev = unsafe { Device::<T>::from_raw((*uctx).device) };
            let mut init = UContextInit::new(uctx);
            // SAFETY: Called from an ib_core callback. On failure, dropping `init` withdraws
            // what the driver offered for mapping while the context still exists.
            let driver = unsafe { dev.with_data(|d| T::alloc_ucontext(d, &mut init, &mut udata)) }?;
            let data = UContextData {
                driver,
                mmaps: init.into_mmaps(),
            };
            // SAFETY: `uctx` is the head of a `UContextObject<T>` (the size we asked for).
            unsafe { (*uctx.cast::<UContextObject<T>>()).data.write(data) };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// Called by ib_core once for a context `alloc_ucontext` initialised.
    unsafe extern "C" fn dealloc_ucontext(uctx: *mut bindings::ib_ucontext) {
        // SAFETY: `data` was initialised by `alloc_ucontext` and is moved out exactly once.
        let (dev, UContextData { driver, mut mmaps }) = unsafe {
            (
                Device::<T>::from_raw((*uctx).device),
                (*uctx.cast::<UContextObject<T>>()).data.assume_init_read(),
            )
        };
        // Withdrawn before the driver releases what backs them, and while the context (whose
        // table ib_core erases them from) still exists.
        mmaps.remove_all();
        // SAFETY: Called from an ib_core callback.
        unsafe { dev.with_data(|d| T::dealloc_ucontext(d, driver)) };
    }

    /// Having this op is what lets ib_core take a device away (driver unbind, rmmod, surprise
    /// removal) while processes hold user contexts: without it every open uverbs file holds a
    /// reference on the driver's module and removal waits until the last process closes its
    /// file. With it, ib_core sends those processes `IB_EVENT_DEVICE_FATAL`, destroys every
    /// object of theirs through the driver's destroy callbacks (with
    /// `RDMA_REMOVE_DRIVER_REMOVE`), zaps the mappings they made of entries offered with
    /// [`UContextInit::insert_io_mmap`] (made with `rdma_user_mmap_io`, the only kind this
    /// abstraction allows), calls this and then `dealloc_ucontext`; later commands on their
    /// files fail with `EIO`. Nothing of the context is left for the driver to stop here.
    ///
    /// # Safety
    ///
    /// Called by ib_core for a context `alloc_ucontext` initialised.
    unsafe extern "C" fn disassociate_ucontext(_uctx: *mut bindings::ib_ucontext) {}

    /// # Safety
    ///
    /// Called by ib_core with a zeroed object of `size_ib_pd` bytes.
    unsafe extern "C" fn alloc_pd(
        pd: *mut bindings::ib_pd,
        udata: *mut bindings::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `udata` is null (kernel caller) or valid for this call.
            let mut udata = unsafe { UData::from_raw(udata) };
            // SAFETY: The PD's device is a `Device<T>` (callback contract).
            let dev = unsafe { Device::<T>::from_raw((*pd).device) };
            // SAFETY: Called from an ib_core callback.
            let value = unsafe { dev.with_data(|d| T::alloc_pd(d, udata.as_mut())) }?;
            // SAFETY: `pd` is the head of a `PdObject<T>`.
            unsafe { (*pd.cast::<PdObject<T>>()).data.write(value) };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// Called by ib_core once for a PD `alloc_pd` initialised.
    unsafe extern "C" fn dealloc_pd(
        pd: *mut bindings::ib_pd,
        _udata: *mut bindings::ib_udata,
    ) -> c_int {
        // SAFETY: `data` was initialised by `alloc_pd` and is moved out exactly once.
        let (dev, value) = unsafe {
            (
                Device::<T>::from_raw((*pd).device),
                (*pd.cast::<PdObject<T>>()).data.assume_init_read(),
            )
        };
        // SAFETY: Called from an ib_core callback.
        unsafe { dev.with_data(|d| T::dealloc_pd(d, value)) };
        0
    }

    /// # Safety
    ///
    /// Called by ib_core with a device of driver `T` and valid pointers.
    unsafe extern "C" fn query_port(
        ib: *mut bindings::ib_device,
        port: u32,
        out: *mut bindings::ib_port_attr,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `ib` belongs to a `Device<T>` (callback contract).
            let dev = unsafe { Device::<T>::from_raw(ib) };
            // SAFETY: Called from an ib_core callback.
            let p = unsafe { dev.with_data(|d| T::query_port(d, port)) };
            // SAFETY: `out` is valid for writes; ib_core zeroed it.
            let a = unsafe { &mut *out };
            a.gid_tbl_len = c_int::try_from(p.gid_tbl_len)?;
            a.set_ip_gids(1);
            // The uverbs port capability bits mirror the kernel's IB_PORT_* bits.
            a.port_cap_flags = bindings::ib_uverbs_query_port_cap_flags_IB_UVERBS_PCF_CM_SUP
                | bindings::ib_uverbs_query_port_cap_flags_IB_UVERBS_PCF_IP_BASED_GIDS;
            a.max_msg_sz = p.max_msg_sz;
            a.pkey_tbl_len = 1;
            a.max_vl_num = 1;
            a.max_mtu = p.max_mtu as u32;
            a.state = bindings::ib_port_state_IB_PORT_DOWN;
            a.phys_state = bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_DISABLED as u8;
            a.active_mtu = p.max_mtu as u32;

            // SAFETY: `ib` is valid; a non-null result holds a reference we drop below.
            let ndev = unsafe { bindings::ib_device_get_netdev(ib, port) };
            if !ndev.is_null() {
                // SAFETY: `ndev` is a held, valid net_device.
                unsafe {
                    a.state = bindings::ib_get_curr_port_state(ndev);
                    if a.state == bindings::ib_port_state_IB_PORT_ACTIVE {
                        a.phys_state =
                            bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_LINK_UP as u8;
                    }
                    let mtu = c_int::try_from((*ndev).mtu).unwrap_or(0);
                    a.active_mtu = attr::active_mtu(p.max_mtu, bindings::iboe_get_mtu(mtu)) as u32;
                    bindings::dev_put(ndev);
                }
            }
            // SAFETY: `ib` is valid; the output pointers are fields of `a`.
            unsafe {
                bindings::ib_get_eth_speed(ib, port, &mut a.active_speed, &mut a.active_width)
            };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// Called by ib_core with a device of driver `T` and valid pointers.
    unsafe extern "C" fn get_port_immutable(
        ib: *mut bindings::ib_device,
        port: u32,
        out: *mut bindings::ib_port_immutable,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `ib` belongs to a `Device<T>` (callback contract).
            let dev = unsafe { Device::<T>::from_raw(ib) };
            // SAFETY: Called from an ib_core callback.
            let p = unsafe { dev.with_data(|d| T::query_port(d, port)) };
            // SAFETY: `out` is valid for writes (callback contract).
            let imm = unsafe { &mut *out };
            imm.pkey_tbl_len = 1;
            imm.gid_tbl_len = c_int::try_from(p.gid_tbl_len)?;
            imm.core_cap_flags = bindings::RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
            imm.max_mad_size = IB_MGMT_MAD_SIZE;
            Ok(0)
        })
    }

    unsafe extern "C" fn get_link_layer(
        _ib: *mut bindings::ib_device,
        _port: u32,
    ) -> bindings::rdma_link_layer {
        bindings::rdma_link_layer_IB_LINK_LAYER_ETHERNET
    }

    /// # Safety
    ///
    /// `pkey` is valid for writes (callback contract).
    unsafe extern "C" fn query_pkey(
        _ib: *mut bindings::ib_device,
        _port: u32,
        index: u16,
        pkey: *mut u16,
    ) -> c_int {
        if index > 0 {
            return EINVAL.to_errno();
        }
        // SAFETY: `pkey` is valid for writes (callback contract).
        unsafe { *pkey = 0xffff };
        0
    }

    /// Runs `f` with the device, port, index and GID of a GID table entry.
    ///
    /// # Safety
    ///
    /// `attr` is a valid GID attribute of a device of driver `T`, passed by ib_core to a
    /// callback.
    unsafe fn with_gid(
        attr: *const bindings::ib_gid_attr,
        f: impl for<'a> FnOnce(&'a T::RegistrationData<'a>, u32, u32, &[u8; 16]) -> Result,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `attr` and its device are valid (function contract); every bit pattern
            // of the GID union is a valid byte array.
            let (dev, port, index, gid) = unsafe {
                (
                    Device::<T>::from_raw((*attr).device),
                    (*attr).port_num,
                    (*attr).index,
                    (*attr).gid.raw,
                )
            };
            // SAFETY: Called from an ib_core callback (function contract).
            unsafe { dev.with_data(|d| f(d, port, index.into(), &gid)) }?;
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// Called by ib_core with a valid GID attribute of a device of driver `T`.
    unsafe extern "C" fn add_gid(
        attr: *const bindings::ib_gid_attr,
        _context: *mut *mut core::ffi::c_void,
    ) -> c_int {
        // SAFETY: Forwarded callback contract.
        unsafe { Self::with_gid(attr, |d, port, index, gid| T::add_gid(d, port, index, gid)) }
    }

    /// # Safety
    ///
    /// Called by ib_core with a valid GID attribute of a device of driver `T`.
    unsafe extern "C" fn del_gid(
        attr: *const bindings::ib_gid_attr,
        _context: *mut *mut core::ffi::c_void,
    ) -> c_int {
        // SAFETY: Forwarded callback contract.
        unsafe { Self::with_gid(attr, |d, port, index, _| T::del_gid(d, port, index)) }
    }
}
