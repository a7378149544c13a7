// SPDX-License-Identifier: GPL-2.0

/*
 * Helpers for the Rust InfiniBand abstractions (rust/kernel/infiniband): the static inline
 * functions of ib_core and netdevice.h they need. Built only when ib_core is built in, as
 * helpers are linked into vmlinux and must not reference module symbols.
 */

#if IS_BUILTIN(CONFIG_INFINIBAND)

#include <linux/netdevice.h>
#include <rdma/ib_addr.h>
#include <rdma/ib_verbs.h>

__rust_helper enum ib_port_state
rust_helper_ib_get_curr_port_state(struct net_device *net_dev)
{
	return ib_get_curr_port_state(net_dev);
}

__rust_helper struct net_device *
rust_helper_netdev_notifier_info_to_dev(const struct netdev_notifier_info *info)
{
	return netdev_notifier_info_to_dev(info);
}

__rust_helper void rust_helper_dev_put(struct net_device *dev)
{
	dev_put(dev);
}

__rust_helper enum ib_mtu rust_helper_iboe_get_mtu(int mtu)
{
	return iboe_get_mtu(mtu);
}

#endif

#if IS_BUILTIN(CONFIG_INFINIBAND)
__rust_helper pgprot_t rust_helper_pgprot_noncached(pgprot_t prot)
{
	return pgprot_noncached(prot);
}
#endif

#if IS_BUILTIN(CONFIG_INFINIBAND)
#include <rdma/ib_umem.h>
#include <rdma/iter.h>
#include <rdma/uverbs_ioctl.h>

__rust_helper struct ib_umem *rust_helper_ib_umem_get_va(struct ib_device *device,
							 unsigned long addr, size_t size,
							 int access)
{
	return ib_umem_get_va(device, addr, size, access);
}

/* Whether the pages were pinned for writing (FOLL_WRITE), i.e. the device may write them. */
__rust_helper bool rust_helper_ib_umem_is_writable(const struct ib_umem *umem)
{
	return umem->writable;
}

__rust_helper size_t rust_helper_ib_umem_num_dma_blocks(struct ib_umem *umem,
							unsigned long pgsz)
{
	return ib_umem_num_dma_blocks(umem, pgsz);
}

__rust_helper void rust_helper___rdma_umem_block_iter_start(struct ib_block_iter *biter,
							    struct ib_umem *umem,
							    unsigned long pgsz)
{
	__rdma_umem_block_iter_start(biter, umem, pgsz);
}

__rust_helper bool rust_helper___rdma_umem_block_iter_next(struct ib_block_iter *biter)
{
	return __rdma_umem_block_iter_next(biter);
}

__rust_helper dma_addr_t rust_helper_rdma_block_iter_dma_address(struct ib_block_iter *biter)
{
	return rdma_block_iter_dma_address(biter);
}

/* The user context a uverbs command runs in (rdma_udata_to_drv_context without container_of). */
__rust_helper struct ib_ucontext *rust_helper_rdma_udata_context(struct ib_udata *udata)
{
	return rdma_udata_to_uverbs_attr_bundle(udata)->context;
}
#endif
