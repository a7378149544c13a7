//! `ferrdma-nic`: serve one emulated ferrdma NIC per vfio-user socket.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;
use std::sync::Arc;

use clap::Parser;
use log::LevelFilter;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use ferrdma_nic::fabric::control;
use ferrdma_nic::fabric::fault::FaultConfig;
use ferrdma_nic::fabric::hub::{Faults, Hub, NicAttachment, ENGINE_QUEUE};
use ferrdma_nic::fabric::queue::frame_queue;
use ferrdma_nic::fabric::{pcap, pcapcheck};
use ferrdma_nic::rdma::caps::CapsPlan;
use ferrdma_nic::rdma::congestion::CcConfig;
use ferrdma_nic::rdma::resources::Resources;
use ferrdma_nic::vfio::socket::{
    bind, serve, Clients, FabricLink, Provision, ServeError, SocketFile,
};

/// The ferrdma emulated RoCEv2 NIC, served to QEMU over vfio-user.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// Unix socket to serve one NIC on; repeat for more NICs (one thread each).
    /// Attach with: -device '{"driver":"vfio-user-pci","socket":{"type":"unix","path":PATH}}'
    #[arg(long = "socket", value_name = "PATH", required_unless_present_any = ["lans", "interfaces", "check_pcap"])]
    sockets: Vec<PathBuf>,

    /// Unix socket for one LAN port of the fabric's switch; repeatable. QEMU joins with
    /// -netdev stream,id=N,server=off,addr.type=unix,addr.path=PATH
    #[arg(long = "lan", value_name = "PATH")]
    lans: Vec<PathBuf>,

    /// A host network interface to join to the fabric's switch as one more LAN (an
    /// AF_PACKET socket in promiscuous mode; needs CAP_NET_RAW): a Linux bridge, VXLAN or
    /// NIC reaches fabrics in other processes, namespaces or hosts. It is lan:N after the
    /// --lan sockets, in order. Repeatable.
    #[arg(long = "interface", value_name = "IFNAME")]
    interfaces: Vec<String>,

    /// Write every frame the switch forwards to this pcap file.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,

    /// Bytes of each frame kept in the --pcap file (128..=65535): the default keeps whole
    /// frames, which --check-pcap needs for the ICRC; 128 keeps every header.
    #[arg(long, value_name = "BYTES", default_value_t = pcap::SNAPLEN, requires = "pcap",
          value_parser = clap::value_parser!(u32).range(pcap::MIN_SNAPLEN as i64..=pcap::SNAPLEN as i64))]
    pcap_snaplen: u32,

    /// Ethernet MAC of the NIC on the socket at the same position (aa:bb:cc:dd:ee:ff). The
    /// driver binds the RDMA port to the guest network device with this MAC. NICs without one
    /// get 52:54:00:fe:10:NN, NN = position + 1.
    #[arg(long = "mac", value_name = "MAC", value_parser = parse_mac)]
    macs: Vec<[u8; 6]>,

    /// Fault injection on the ports of the --lan socket at position N (0-based), e.g.
    /// 1:drop=0.05,dup=0.01,reorder=0.01,delay=0.1,delay-ms=20. ce=P marks ECN-capable frames
    /// Congestion Experienced. Repeatable.
    #[arg(long = "fault", value_name = "N:SPEC", value_parser = parse_fault, requires = "lans")]
    faults: Vec<(usize, FaultConfig)>,

    /// Fault injection on the frames the switch hands to the RoCE engine of the NIC at
    /// position N (0-based), same SPEC as --fault. Repeatable.
    #[arg(long = "nic-fault", value_name = "N:SPEC", value_parser = parse_fault)]
    nic_faults: Vec<(usize, FaultConfig)>,

    /// Seed of the fault injection: the same seed and connection order give the same faults.
    #[arg(long, value_name = "N", default_value_t = 0)]
    fault_seed: u64,

    /// Unix socket for controlling the fabric at run time (line protocol: link PORT... up|down,
    /// fault PORT SPEC|off, stats, help; see fabric/control.rs).
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,

    /// Check a pcap capture instead of serving: every RoCEv2 frame must pass the NIC's parser
    /// and ICRC check. Prints counts per direction; exits 1 on a bad frame, 2 on a bad file.
    #[arg(long, value_name = "FILE", exclusive = true)]
    check_pcap: Option<PathBuf>,

    /// Test only: answer the driver's QUERY_CAPS commands with hostile values, to prove the
    /// driver validates them. Each NIC answers its n-th QUERY_CAPS (one per driver probe) with
    /// the n-th profile and every later one with the last: nominal (the real limits),
    /// oversized (every limit at its type's maximum; a careful driver clamps) or impossible
    /// (no SGE, no usable QP, no CQ entries, no 4 KiB pages; a careful driver refuses the
    /// device). The device keeps enforcing its real limits. Example: oversized,impossible,nominal
    #[arg(long, value_name = "PROFILE[,PROFILE...]", value_parser = parse_caps_plan)]
    hostile_caps: Option<String>,

    /// The object counts every NIC is provisioned with, reported in QUERY_CAPS and enforced
    /// (as an E810's RDMA resource profile): nominal (the manual's limits: 16,384 QPs and CQs,
    /// 65,536 MRs) or small (1024 QPs and CQs, 4096 MRs and PDs, 256 AHs).
    #[arg(long, value_name = "PROFILE", default_value = "nominal")]
    resources: Resources,

    /// Congestion control of every NIC (the control socket's `cc nic:N` changes one at run
    /// time): KEY=VALUE,... with keys ecn and dcqcn (on|off, default off), line-mbps (the
    /// port speed DCQCN recovers to, default 100000) and DCQCN's parameters by their mlx5
    /// roce_np/roce_rp names (see rdma/congestion.rs). Example: ecn=on,dcqcn=on
    #[arg(long, value_name = "SPEC", value_parser = parse_cc)]
    cc: Option<CcConfig>,

    /// Serve each NIC's clients one after another until stopped (SIGTERM): a client that
    /// disconnects is the function hot-unplugged (QMP device_del), the next one the function
    /// plugged in again (device_add), on a reset device. Without it a NIC ends with its
    /// first client (QEMU exiting).
    #[arg(long)]
    replug: bool,

    /// Log level: off, error, warn, info, debug or trace. RUST_LOG refines it per module.
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    log_level: LevelFilter,
}

/// Parses a colon-separated MAC address.
fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for byte in &mut mac {
        let p = parts.next().ok_or_else(|| format!("{s}: too few bytes"))?;
        if p.len() != 2 {
            return Err(format!("{s}: each byte is two hex digits"));
        }
        *byte = u8::from_str_radix(p, 16).map_err(|e| format!("{s}: {e}"))?;
    }
    if parts.next().is_some() {
        return Err(format!("{s}: too many bytes"));
    }
    Ok(mac)
}

/// Parses `N:SPEC` for --fault.
fn parse_fault(s: &str) -> Result<(usize, FaultConfig), String> {
    let (n, spec) = s
        .split_once(':')
        .ok_or_else(|| format!("{s}: expected N:SPEC"))?;
    let n = n.parse().map_err(|e| format!("{s}: {e}"))?;
    let cfg = FaultConfig::parse(spec).map_err(|e| e.to_string())?;
    Ok((n, cfg))
}

/// Checks `--hostile-caps` (each NIC parses it again for its own plan).
fn parse_cc(s: &str) -> Result<CcConfig, String> {
    CcConfig::default().with_spec(s).map_err(|e| e.to_string())
}

fn parse_caps_plan(s: &str) -> Result<String, String> {
    CapsPlan::parse(s).map_err(|e| e.to_string())?;
    Ok(s.to_string())
}

/// The default MAC of the NIC at position `i`.
fn default_mac(i: usize) -> [u8; 6] {
    [0x52, 0x54, 0x00, 0xfe, 0x10, (i as u8).wrapping_add(1)]
}

enum Event {
    Signal(i32),
    Done(usize, Result<(), ServeError>),
}

/// `--check-pcap FILE`.
fn check_pcap(path: &std::path::Path) -> ExitCode {
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    match pcapcheck::check(&data) {
        Ok(report) => {
            print!("{}", report.text());
            if report.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {}: {e}", path.display());
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    env_logger::Builder::new()
        .filter_level(cli.log_level)
        .parse_default_env()
        .init();
    if let Some(path) = &cli.check_pcap {
        return check_pcap(path);
    }

    if cli.macs.len() > cli.sockets.len() {
        log::error!(
            "{} --mac options for {} sockets",
            cli.macs.len(),
            cli.sockets.len()
        );
        return ExitCode::FAILURE;
    }
    let mut seen = HashSet::new();
    for s in cli.sockets.iter().chain(&cli.lans) {
        if !seen.insert(s) {
            log::error!("{}: given twice", s.display());
            return ExitCode::FAILURE;
        }
    }

    // Bind every socket before serving any, so a bad path fails the whole start-up
    // (already bound sockets are removed as their SocketFiles drop).
    let mut bound = Vec::new();
    for path in &cli.sockets {
        match bind(path) {
            Ok((listener, file)) => bound.push((listener, Arc::new(file))),
            Err(e) => {
                log::error!("{e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut files: Vec<Arc<SocketFile>> = bound.iter().map(|(_, f)| Arc::clone(f)).collect();
    let nics = files.len();

    // The fabric joins every NIC's transport engine and the LAN sockets (see fabric/hub.rs);
    // each NIC gets a bounded inbound queue the switch feeds.
    let lan_files;
    let mut control_file = None;
    let hub_control;
    let mut links: Vec<Option<FabricLink>> = (0..nics).map(|_| None).collect();
    let macs: Vec<[u8; 6]> = (0..nics)
        .map(|i| cli.macs.get(i).copied().unwrap_or_else(|| default_mac(i)))
        .collect();
    {
        let mut inbound = Vec::new();
        let mut attach = Vec::new();
        for mac in &macs {
            let (tx, rx) = frame_queue(ENGINE_QUEUE);
            inbound.push(rx);
            attach.push(NicAttachment {
                mac: *mac,
                inbound: tx,
            });
        }
        if let Some((n, _)) = cli.faults.iter().find(|(n, _)| *n >= cli.lans.len()) {
            log::error!("--fault {n}: there are {} --lan sockets", cli.lans.len());
            return ExitCode::FAILURE;
        }
        if let Some((n, _)) = cli.nic_faults.iter().find(|(n, _)| *n >= nics) {
            log::error!("--nic-fault {n}: there are {nics} --socket NICs");
            return ExitCode::FAILURE;
        }
        let faults = Faults {
            per_lan: cli.faults.iter().copied().collect(),
            per_nic: cli.nic_faults.iter().copied().collect(),
            seed: cli.fault_seed,
        };
        let capture = cli.pcap.as_ref().map(|path| pcap::Capture {
            path: path.clone(),
            snaplen: cli.pcap_snaplen,
        });
        match Hub::start(&cli.lans, capture.as_ref(), attach, faults) {
            Ok(mut hub) => {
                for ifname in &cli.interfaces {
                    if let Err(e) = hub.attach_interface(ifname) {
                        log::error!("--interface {ifname}: {e}");
                        return ExitCode::FAILURE;
                    }
                }
                if let Some(cc) = cli.cc {
                    if let Err(e) = hub.control.set_cc_all(cc) {
                        log::error!("--cc: {e}");
                        return ExitCode::FAILURE;
                    }
                }
                if let Some(path) = &cli.control {
                    let (listener, file) = match bind(path) {
                        Ok(b) => b,
                        Err(e) => {
                            log::error!("--control: {e}");
                            return ExitCode::FAILURE;
                        }
                    };
                    if let Err(e) = control::spawn_server(listener, Arc::new(hub.control.clone())) {
                        log::error!("--control: starting its thread: {e}");
                        file.remove();
                        return ExitCode::FAILURE;
                    }
                    control_file = Some(Arc::new(file));
                }
                lan_files = hub.sockets;
                hub_control = hub.control;
                for ((link, rx), port) in links.iter_mut().zip(inbound).zip(hub.engine_ports) {
                    *link = Some(FabricLink { inbound: rx, port });
                }
            }
            Err(e) => {
                log::error!("{e}");
                return ExitCode::FAILURE;
            }
        }
    }

    let (tx, rx) = mpsc::channel();
    let mut signals = match Signals::new([SIGTERM, SIGINT]) {
        Ok(s) => s,
        Err(e) => {
            log::error!("installing signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let sig_tx = tx.clone();
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            let _ = sig_tx.send(Event::Signal(sig));
        }
    });

    for (i, ((listener, file), link)) in bound.into_iter().zip(links).enumerate() {
        let tx = tx.clone();
        let mac = macs.get(i).copied().unwrap_or_else(|| default_mac(i));
        let provision = Provision {
            resources: cli.resources,
            caps: cli
                .hostile_caps
                .as_deref()
                .and_then(|s| CapsPlan::parse(s).ok())
                .map(Arc::new),
        };
        let clients = if cli.replug {
            Clients::UntilStopped
        } else {
            Clients::One
        };
        let spawned = std::thread::Builder::new()
            .name(format!("nic{i}"))
            .spawn(move || {
                let r = serve(listener, &file, mac, link, provision, clients);
                let _ = tx.send(Event::Done(i, r));
            });
        if let Err(e) = spawned {
            log::error!("spawning the thread for NIC {i}: {e}");
            files.iter().for_each(|f| f.remove());
            return ExitCode::FAILURE;
        }
    }
    drop(tx);

    let mut remaining = nics;
    files.extend(lan_files);
    files.extend(control_file);
    let mut failed = false;
    // Without NICs the fabric runs until a signal.
    while remaining > 0 || nics == 0 {
        match rx.recv() {
            Ok(Event::Signal(sig)) => {
                log::info!("signal {sig}: shutting down");
                // The process exits without unwinding: write out the capture's buffer.
                hub_control.flush_capture();
                files.iter().for_each(|f| f.remove());
                // Serving threads may be blocked in accept/recv; exiting ends them.
                return if failed {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                };
            }
            Ok(Event::Done(i, r)) => {
                remaining -= 1;
                if let Err(e) = r {
                    failed = true;
                    let path = files.get(i).map(|f| f.path().display().to_string());
                    log::error!("NIC {i} ({}): {e}", path.unwrap_or_default());
                }
            }
            Err(_) => break,
        }
    }
    hub_control.flush_capture();
    // Fabric threads hold references to the LAN socket files: remove them explicitly.
    files.iter().for_each(|f| f.remove());
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_strictly() {
        assert_eq!(
            parse_mac("52:54:00:fe:10:0a"),
            Ok([0x52, 0x54, 0, 0xfe, 0x10, 0x0a])
        );
        assert!(parse_mac("52:54:00:fe:10").is_err());
        assert!(parse_mac("52:54:00:fe:10:0a:01").is_err());
        assert!(parse_mac("52:54:00:fe:10:g0").is_err());
        assert!(parse_mac("52:54:00:fe:10:1").is_err());
        assert!(parse_mac("").is_err());
    }

    #[test]
    fn default_macs_follow_the_position() {
        assert_eq!(default_mac(0), [0x52, 0x54, 0, 0xfe, 0x10, 1]);
        assert_eq!(default_mac(1), [0x52, 0x54, 0, 0xfe, 0x10, 2]);
    }
}
