//! A fabric port on one of the host's network interfaces (issue 20): an AF_PACKET socket
//! bound to the interface in promiscuous mode, so that the fabric is one more station on the
//! host's Ethernet. Joined to a Linux bridge, a VXLAN or a physical NIC, it lets the NICs and
//! VMs of fabrics in other processes, network namespaces or hosts reach each other, and a
//! ferrdma VM talk RoCEv2 to any RoCE station on that network.
//!
//! The socket sees what the host sends on the interface too: those frames (packet type
//! OUTGOING, among them the fabric's own) are skipped, so nothing comes back into the switch.
//! Frames longer than [`MAX_FRAME`] are dropped whole. Linux takes the VLAN tag out of every
//! tagged frame it receives (in software when the interface does not) before a packet socket
//! sees it, and reports it beside the frame (`PACKET_AUXDATA`); the tag goes back in before
//! the frame enters the switch, so RoCE over VLANs crosses host networking as it left.

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
        if set_packet_option(&fd, libc::PACKET_ADD_MEMBERSHIP, &mreq) < 0 {
            return Err(err("promiscuous mode"));
        }
        let on: libc::c_int = 1;
        if set_packet_option(&fd, libc::PACKET_AUXDATA, &on) < 0 {
            return Err(err("PACKET_AUXDATA"));
        }
        Ok(RawSocket { fd })
    }

    /// A second handle on the same socket (one thread reads, another writes).
    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(RawSocket {
            fd: self.fd.try_clone()?,
        })
    }

    /// Waits for the next frame from the interface and copies it into `buf`, with the VLAN
    /// tag the kernel took out put back; `Ok(None)` for one to skip (the host's own, or one
    /// longer than `buf`).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: an all-zero sockaddr_ll is a valid value of the plain C struct.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        // u64 words: the control buffer must be aligned for cmsghdr.
        let mut control = [0u64; 8];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: an all-zero msghdr is a valid value of the plain C struct.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut from as *mut libc::sockaddr_ll).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: `msg` names `iov` (`buf`, writable for its length), `from` and `control`,
        // all live and writable for the lengths given.
        let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_TRUNC) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        if from.sll_pkttype == libc::PACKET_OUTGOING as u8 || n > buf.len() {
            return Ok(None);
        }
        let mut tag = None;
        // SAFETY: `msg` is the header recvmsg filled in: its control fields describe
        // `control`, and the CMSG macros stay inside msg_controllen.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                let want = libc::CMSG_LEN(std::mem::size_of::<libc::tpacket_auxdata>() as u32);
                if (*c).cmsg_level == libc::SOL_PACKET
                    && (*c).cmsg_type == libc::PACKET_AUXDATA
                    && (*c).cmsg_len >= want as usize
                {
                    let aux: libc::tpacket_auxdata =
                        std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    tag = vlan_tag(&aux);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        match tag {
            None => Ok(Some(n)),
            Some((tpid, tci)) => Ok(insert_vlan_tag(buf, n, tpid, tci)),
        }
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

/// setsockopt(SOL_PACKET, `name`) with `value`, a plain C value of the option's type.
fn set_packet_option<T>(fd: &OwnedFd, name: libc::c_int, value: &T) -> libc::c_int {
    // SAFETY: `value` is valid for reads of its size, which is the length given.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    }
}

/// The tag the kernel took out of a received frame, as (TPID, TCI), from its auxiliary data.
fn vlan_tag(aux: &libc::tpacket_auxdata) -> Option<(u16, u16)> {
    if aux.tp_status & libc::TP_STATUS_VLAN_VALID == 0 {
        return None;
    }
    let tpid = if aux.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
        aux.tp_vlan_tpid
    } else {
        0x8100
    };
    Some((tpid, aux.tp_vlan_tci))
}

/// Puts a VLAN tag back after the two MAC addresses of the `n`-byte frame in `buf`; the new
/// length, or `None` when the frame is too short to have them or the tag does not fit.
fn insert_vlan_tag(buf: &mut [u8], n: usize, tpid: u16, tci: u16) -> Option<usize> {
    if n < 12 || n > buf.len() || buf.len() - n < 4 {
        return None;
    }
    buf.copy_within(12..n, 16);
    buf[12..14].copy_from_slice(&tpid.to_be_bytes());
    buf[14..16].copy_from_slice(&tci.to_be_bytes());
    Some(n + 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stripped_vlan_tag_goes_back_after_the_addresses() {
        let mut buf = [0u8; 64];
        let frame: Vec<u8> = (1..=20).collect();
        buf[..20].copy_from_slice(&frame);
        assert_eq!(insert_vlan_tag(&mut buf, 20, 0x8100, 0x6064), Some(24));
        assert_eq!(&buf[..12], &frame[..12]);
        assert_eq!(&buf[12..16], &[0x81, 0x00, 0x60, 0x64]);
        assert_eq!(&buf[16..24], &frame[12..]);
        // No room for the tag, a runt, a length beyond the buffer.
        let mut full = [0u8; 20];
        assert_eq!(insert_vlan_tag(&mut full, 20, 0x8100, 1), None);
        assert_eq!(insert_vlan_tag(&mut buf, 11, 0x8100, 1), None);
        assert_eq!(insert_vlan_tag(&mut buf, 65, 0x8100, 1), None);
    }

    /// Brings `lo` of the calling thread's network namespace up.
    fn loopback_up() -> io::Result<()> {
        // SAFETY: plain socket creation; the result is checked and owned below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a descriptor just created and owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an all-zero ifreq is a valid value of the plain C struct.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        req.ifr_name[..2].copy_from_slice(&[b'l' as libc::c_char, b'o' as libc::c_char]);
        // SAFETY: `req` is a valid ifreq naming an interface; the ioctls read and write it.
        unsafe {
            if libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
                return Err(io::Error::last_os_error());
            }
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(fd.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// The kernel's own VLAN untagging and the socket's tag reinsertion, end to end: a
    /// tagged frame sent on `lo` in a network namespace of this test's own arrives tagged.
    /// Needs CAP_SYS_ADMIN and CAP_NET_RAW (make check runs as root).
    #[test]
    fn a_tagged_frame_crosses_an_interface_with_its_tag() {
        let t = std::thread::spawn(|| -> Result<(), String> {
            // SAFETY: unshare only moves this thread into a new network namespace.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(format!(
                    "unshare(CLONE_NEWNET): {} (run as root)",
                    io::Error::last_os_error()
                ));
            }
            loopback_up().map_err(|e| format!("lo up: {e}"))?;
            let rx = RawSocket::open("lo").map_err(|e| e.to_string())?;
            let tx = RawSocket::open("lo").map_err(|e| e.to_string())?;
            let mut frame = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
            frame.extend_from_slice(&[0x81, 0x00, 0x60, 0x64, 0x08, 0x00]);
            frame.extend((0..46u8).map(|i| i ^ 0x5a));
            tx.send(&frame).map_err(|e| format!("send: {e}"))?;
            let mut buf = [0u8; MAX_FRAME];
            // The receiving socket also hears the send as OUTGOING (skipped: None).
            for _ in 0..4 {
                if let Some(n) = rx.recv(&mut buf).map_err(|e| format!("recv: {e}"))? {
                    return if buf[..n] == frame[..] {
                        Ok(())
                    } else {
                        Err(format!("received {:02x?}", &buf[..n]))
                    };
                }
            }
            Err("the frame did not come back".into())
        });
        t.join()
            .expect("the test thread")
            .expect("the tagged frame");
    }

    #[test]
    fn the_tag_comes_from_the_auxiliary_data() {
        // SAFETY: an all-zero tpacket_auxdata is a valid value of the plain C struct.
        let mut aux: libc::tpacket_auxdata = unsafe { std::mem::zeroed() };
        aux.tp_vlan_tci = 0x2064;
        aux.tp_vlan_tpid = 0x88a8;
        assert_eq!(vlan_tag(&aux), None, "no tag unless VLAN_VALID");
        aux.tp_status = libc::TP_STATUS_VLAN_VALID;
        assert_eq!(
            vlan_tag(&aux),
            Some((0x8100, 0x2064)),
            "802.1Q unless the TPID is valid"
        );
        aux.tp_status |= libc::TP_STATUS_VLAN_TPID_VALID;
        assert_eq!(vlan_tag(&aux), Some((0x88a8, 0x2064)));
    }

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
