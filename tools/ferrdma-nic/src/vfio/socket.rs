//! Serving one device on one Unix socket with our vfio-user server
//! ([`crate::vfio::server`]).
//!
//! The listening socket is bound here so that a stale socket file left by a killed run can
//! be replaced, and so that removal of the socket file is under our control:
//! [`SocketFile`] removes it exactly once, and only if the path still names the socket we
//! created. The server serves a single client connection and returns when the client
//! disconnects or the connection has to end (malformed framing, too many file
//! descriptors). It does not panic on client input, so nothing here catches panics.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use thiserror::Error;

use crate::device::{Device, TxSink};
use crate::fabric::hub::EnginePort;
use crate::fabric::queue::FrameReceiver;
use crate::rdma::caps::CapsPlan;
use crate::rdma::resources::Resources;
use crate::shared::{spawn_engine, SharedDevice};
use crate::vfio::layout::{irq_infos, server_regions};
use crate::vfio::server::{Server, ServerError};

/// Why serving failed.
#[derive(Debug, Error)]
pub enum ServeError {
    #[error("{0}: exists and is not a socket")]
    NotASocket(PathBuf),
    #[error("{0}: in use (a process listens on it), or its state is unknown")]
    InUse(PathBuf),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("vfio-user: {0}")]
    Protocol(#[from] ServerError),
}

/// A socket file we created; removed on [`SocketFile::remove`] or drop.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    /// (device, inode) of the socket we bound, `None` once removed. Together with the file
    /// type this tells our socket from whatever replaced it.
    identity: Mutex<Option<(u64, u64)>>,
}

impl SocketFile {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the socket file if it is still ours. Idempotent; safe from any thread.
    pub fn remove(&self) {
        let mut guard = match self.identity.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let Some(id) = guard.take() else { return };
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if m.file_type().is_socket() && (m.dev(), m.ino()) == id => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    log::warn!("{}: removing socket: {e}", self.path.display());
                }
            }
            Ok(_) => log::warn!(
                "{}: replaced by someone else, not removing it",
                self.path.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => log::warn!("{}: {e}", self.path.display()),
        }
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        self.remove();
    }
}

/// `__SO_ACCEPTCON` in the flags column of `/proc/net/unix`: the socket is listening.
const SO_ACCEPTCON: u32 = 1 << 16;

/// Whether some process is listening on a Unix socket bound at `path`, per
/// `/proc/net/unix` (of this network namespace). `None` if that cannot be read.
///
/// Connecting to find out would be wrong: a vfio-user server serves the first client that
/// connects, so a probe would take the live server's only connection and end it.
fn is_listening(path: &Path) -> Option<bool> {
    let table = std::fs::read_to_string("/proc/net/unix").ok()?;
    let given = path.as_os_str().to_string_lossy().into_owned();
    let absolute = std::path::absolute(path)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| given.clone());
    Some(table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(flags), Some(bound)) = (fields.get(3), fields.get(7..)) else {
            return false;
        };
        let listening = u32::from_str_radix(flags, 16).is_ok_and(|f| f & SO_ACCEPTCON != 0);
        let bound = bound.join(" ");
        listening && (bound == given || bound == absolute)
    }))
}

/// Binds a listening socket at `path`, replacing a stale socket file nobody listens on.
pub fn bind(path: &Path) -> Result<(UnixListener, SocketFile), ServeError> {
    let io = |source| ServeError::Io {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => match is_listening(path) {
            Some(false) => {
                log::info!("{}: removing stale socket", path.display());
                std::fs::remove_file(path).map_err(io)?;
            }
            Some(true) | None => return Err(ServeError::InUse(path.to_path_buf())),
        },
        Ok(_) => return Err(ServeError::NotASocket(path.to_path_buf())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let listener = UnixListener::bind(path).map_err(io)?;
    let m = std::fs::symlink_metadata(path).map_err(io)?;
    Ok((
        listener,
        SocketFile {
            path: path.to_path_buf(),
            identity: Mutex::new(Some((m.dev(), m.ino()))),
        },
    ))
}

/// A NIC's place on the fabric: where its RoCE frames come from and go to.
pub struct FabricLink {
    pub inbound: FrameReceiver,
    pub port: EnginePort,
}

/// How many clients a NIC serves, one after another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clients {
    /// The first: the NIC ends when it disconnects (QEMU exited: the VM's lifetime).
    One,
    /// Each in turn until the process is stopped: a client that disconnects was a
    /// hot-unplugged function (QMP device_del), the next one is the function plugged in again
    /// (device_add), and it finds the device as after a reset, on the same fabric port.
    UntilStopped,
}

/// How the host provisions a NIC (not guest state: kept across its resets).
#[derive(Debug, Clone, Default)]
pub struct Provision {
    /// Its object tables' sizes (`--resources`).
    pub resources: Resources,
    /// Test only: hostile QUERY_CAPS replies (`--hostile-caps`).
    pub caps: Option<Arc<CapsPlan>>,
}

/// Serves one NIC to the clients that connect (see [`Clients`]). With `fabric`,
/// its transport engine exchanges RoCE frames with the fabric (see `shared` for the
/// threads); without, frames to peers that are not local are lost on an unplugged port.
///
/// A malformed message gets an error reply, or ends this connection with an error; it
/// never takes the process down.
pub fn serve(
    listener: UnixListener,
    socket: &SocketFile,
    mac: [u8; 6],
    fabric: Option<FabricLink>,
    provision: Provision,
    clients: Clients,
) -> Result<(), ServeError> {
    let name = socket.path().display().to_string();
    let mut device = Device::new(name);
    device.set_mac(mac);
    device.set_resources(provision.resources);
    device.set_caps_plan(provision.caps);
    let inbound = match fabric {
        Some(f) => {
            let port = f.port;
            device.set_sabotage(port.sabotage());
            device.set_cc_knob(port.cc());
            device.set_sink(TxSink(Box::new(move |frame| port.send(frame))));
            Some(f.inbound)
        }
        None => {
            // An unplugged port: frames vanish (the engine's outbox must not fill up).
            device.set_sink(TxSink(Box::new(|_| {})));
            None
        }
    };
    serve_device(
        listener,
        socket,
        SharedDevice::new(device),
        inbound,
        clients,
    )
}

/// The part of [`serve`] after the device is built: runs the engine thread and the
/// protocol for each client, then cleans up. Tests call it with a device they keep a handle
/// to, to check its state after hostile messages.
pub(crate) fn serve_device(
    listener: UnixListener,
    socket: &SocketFile,
    mut shared: SharedDevice,
    mut inbound: Option<FrameReceiver>,
    clients: Clients,
) -> Result<(), ServeError> {
    let name = socket.path().display().to_string();
    // The engine thread is named after this one ("nic0" makes "nic0-engine"): Linux keeps
    // 15 bytes of a thread's name, too few for a socket path, and profiles go by them.
    let thread = std::thread::current()
        .name()
        .map_or_else(|| name.clone(), str::to_owned);
    let server = Server::new(irq_infos(), server_regions());
    let outcome = loop {
        let engine = spawn_engine(&thread, shared.clone(), inbound.take()).map_err(|source| {
            ServeError::Io {
                path: socket.path().to_path_buf(),
                source,
            }
        })?;
        log::info!("{name}: waiting for a vfio-user client");
        let outcome = server.run(&listener, &mut shared);
        // Stop the engine thread first: afterwards nothing but this thread uses the device.
        inbound = engine.finish();
        // Whatever ended the connection, the client's memory is unmapped, its eventfds closed
        // and the device reset now, not whenever the last reference to the device goes.
        shared.lock().disconnect();
        match (&outcome, clients) {
            (Ok(()), Clients::UntilStopped) => {
                log::info!("{name}: client disconnected (unplugged); waiting for the next")
            }
            _ => break outcome,
        }
    };
    // Stop accepting and unlink the socket before reporting.
    drop(listener);
    socket.remove();
    match outcome {
        Ok(()) => {
            log::info!("{name}: client disconnected");
            Ok(())
        }
        Err(e) => {
            log::warn!("{name}: connection ended: {e}");
            Err(e.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    /// A private directory for one test, removed when dropped.
    struct TmpDir(PathBuf);

    impl TmpDir {
        fn new(test: &str) -> Self {
            let dir = std::env::temp_dir()
                .join(format!("ferrdma-nic-test-{}-{test}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }

        fn path(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }
    }

    impl Drop for TmpDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn bind_replaces_stale_socket_and_refuses_live_ones() {
        let dir = TmpDir::new("stale.sock");
        let path = dir.path("stale.sock");
        {
            // A listener that goes away without removing its file leaves a stale socket.
            let _l = UnixListener::bind(&path).unwrap();
        }
        assert!(path.exists());
        let (listener, file) = bind(&path).unwrap();
        assert_eq!(is_listening(&path), Some(true));
        assert!(matches!(bind(&path), Err(ServeError::InUse(_))));
        // The refused attempt did not connect: the listener has no pending client.
        listener.set_nonblocking(true).unwrap();
        assert!(listener.accept().is_err());
        drop(listener);
        assert_eq!(is_listening(&path), Some(false));
        file.remove();
        assert!(!path.exists());
        file.remove();
    }

    #[test]
    fn bind_refuses_non_sockets_and_remove_spares_foreign_files() {
        let dir = TmpDir::new("plain");
        let path = dir.path("plain");
        std::fs::write(&path, b"x").unwrap();
        assert!(matches!(bind(&path), Err(ServeError::NotASocket(_))));
        std::fs::remove_file(&path).unwrap();

        let (listener, file) = bind(&path).unwrap();
        drop(listener);
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"someone else's").unwrap();
        file.remove();
        assert!(
            path.exists(),
            "a file that replaced our socket must survive"
        );
        std::fs::remove_file(&path).unwrap();
    }

    /// `serve` on a thread of its own: one client, no fabric, nominal provisioning.
    fn serve_in_thread(
        listener: UnixListener,
        file: SocketFile,
    ) -> std::thread::JoinHandle<Result<(), ServeError>> {
        std::thread::spawn(move || {
            serve(
                listener,
                &file,
                [0; 6],
                None,
                Provision::default(),
                Clients::One,
            )
        })
    }

    #[test]
    fn serve_ends_when_the_client_disconnects() {
        let dir = TmpDir::new("serve.sock");
        let path = dir.path("serve.sock");
        let (listener, file) = bind(&path).unwrap();
        let t = serve_in_thread(listener, file);
        let c = UnixStream::connect(&path).unwrap();
        drop(c);
        t.join().unwrap().unwrap();
        assert!(!path.exists(), "socket file is removed when serving ends");
    }

    #[test]
    fn serve_refuses_a_version_message_shorter_than_its_header() {
        use std::io::Write;
        let dir = TmpDir::new("malformed.sock");
        let path = dir.path("malformed.sock");
        let (listener, file) = bind(&path).unwrap();
        let t = serve_in_thread(listener, file);
        let mut c = UnixStream::connect(&path).unwrap();
        // VERSION header claiming a total size smaller than the header itself.
        let mut hdr = Vec::new();
        hdr.extend_from_slice(&0u16.to_le_bytes()); // id
        hdr.extend_from_slice(&1u16.to_le_bytes()); // VERSION
        hdr.extend_from_slice(&4u32.to_le_bytes()); // size
        hdr.extend_from_slice(&0u32.to_le_bytes()); // flags
        hdr.extend_from_slice(&0u32.to_le_bytes()); // error
        hdr.extend_from_slice(&[0u8; 4]); // major/minor
        let _ = c.write_all(&hdr);
        let r = t.join().expect("serve must not panic");
        assert!(
            matches!(r, Err(ServeError::Protocol(ServerError::Framing(_)))),
            "{r:?}"
        );
        // The error reply came before the end of the connection (which, with the unread
        // rest of the message left behind, the client may see as a reset).
        let mut reply = [0u8; 16];
        std::io::Read::read_exact(&mut c, &mut reply).unwrap();
        assert!(matches!(
            std::io::Read::read(&mut c, &mut [0u8; 1]),
            Ok(0) | Err(_)
        ));
        assert_eq!(u32::from_le_bytes(reply[8..12].try_into().unwrap()), 0x21);
        assert_eq!(
            u32::from_le_bytes(reply[12..16].try_into().unwrap()),
            libc::EINVAL as u32
        );
    }
}
