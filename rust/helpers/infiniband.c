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
