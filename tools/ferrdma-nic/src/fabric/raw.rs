//! A fabric port on one of the host's network interfaces (issue 20): an AF_PACKET socket
//! bound to the interface in promiscuous mode, so that the fabric is one more station on the
//! host's Ethernet. Joined to a Linux bridge, a VXLAN or a physical NIC, it lets the NICs and
//! VMs of fabrics in other processes, network namespaces or hosts reach each other, and a
//! ferrdma VM talk RoCEv2 to any RoCE station on that network.
//!
//! The socket sees what the host sends on the interface too: those frames (packet type
//! OUTGOING, among them the fabric's own) are skipped, so nothing comes back into the switch.
//! Frames longer than [`MAX_FRAME`] are dropped whole. A VLAN tag that the interface's
//! receive offload strips is lost (RoCE over VLANs across hosts needs the offload off).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use thiserror::Error;

/// Longest frame taken from or given to the interface (a 9000-byte jumbo frame and more).
pub const MAX_FRAME: usize = 16 * 1024;

#[derive(Debug, Error)]
pub enum RawError {
    #[error("interface name {0:?} is not a valid interface name")]
    Name(String),
    #[error("no interface {0:?}")]
    NoInterface(String),
    #[error("interface {name}: {what}: {source} (an AF_PACKET socket needs CAP_NET_RAW)")]
    Socket {
        name: String,
        what: &'static str,
        source: io::Error,
    },
}

/// An AF_PACKET socket bound to one interface.
#[derive(Debug)]
pub struct RawSocket {
    fd: OwnedFd,
}

/// `ETH_P_ALL` in network byte order, as the socket calls want it.
fn eth_p_all() -> u16 {
    (libc::ETH_P_ALL as u16).to_be()
}

impl RawSocket {
    /// Opens a socket on interface `name`, which then hears every frame on it.
    pub fn open(name: &str) -> Result<Self, RawError> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(RawError::Name(name.to_string()));
        }
        let cname = CString::new(name).map_err(|_| RawError::Name(name.to_string()))?;
        // SAFETY: `cname` is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(RawError::NoInterface(name.to_string()));
        }
        let err = |what| RawError::Socket {
            name: name.to_string(),
            what,
            source: io::Error::last_os_error(),
        };
        // SAFETY: plain socket creation; the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                i32::from(eth_p_all()),
            )
        };
        if fd < 0 {
            return Err(err("socket"));
        }
        // SAFETY: `fd` is a descriptor just created and owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an all-zero sockaddr_ll is a valid value of the plain C struct.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = eth_p_all();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll of the length given.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(err("bind"));
        }
        // SAFETY: an all-zero packet_mreq is a valid value of the plain C struct.
        let mut mreq: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mreq.mr_ifindex = ifindex as i32;
        mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
        // SAFETY: `mreq` is a valid packet_mreq of the length given.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                (&mreq as *const libc::packet_mreq).cast(),
                std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(err("promiscuous mode"));
        }
        Ok(RawSocket { fd })
    }

    /// A second handle on the same socket (one thread reads, another writes).
    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(RawSocket {
            fd: self.fd.try_clone()?,
        })
    }

    /// Waits for the next frame from the interface and copies it into `buf`; `Ok(None)` for
    /// one to skip (the host's own, or one longer than `buf`).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: an all-zero sockaddr_ll is a valid value of the plain C struct.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: `buf` is writable for its length, `from` for `len` bytes.
        let n = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_TRUNC,
                (&mut from as *mut libc::sockaddr_ll).cast(),
                &mut len,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        if from.sll_pkttype == libc::PACKET_OUTGOING as u8 || n > buf.len() {
            return Ok(None);
        }
        Ok(Some(n))
    }

    /// Sends one frame out of the interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: `frame` is a valid buffer of its length.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_interface_names_are_refused() {
        for bad in ["", "a-name-far-too-long-for-linux", "nul\0name"] {
            assert!(
                matches!(RawSocket::open(bad), Err(RawError::Name(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            RawSocket::open("ferrdma-none0"),
            Err(RawError::NoInterface(_))
        ));
    }
}
