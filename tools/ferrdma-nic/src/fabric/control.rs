//! The fabric's control socket (`--control PATH`): a unix socket speaking a line protocol to
//! change the running fabric, e.g. to pull a cable in the middle of a test.
//!
//! Requests, one per line (at most [`MAX_LINE`] bytes, UTF-8, words separated by blanks):
//!
//! * `link PORT... up|down`: the link of each PORT (up to 16, applied together); while it is
//!   down no frame is sent out of it or taken in from it, as with a pulled cable (frames it
//!   held back for delay or reorder are lost).
//! * `fault PORT SPEC`: the fault injection of PORT from now on, SPEC as for `--fault`
//!   (`drop=P,dup=P,reorder=P,delay=P,delay-ms=MS,ce=P`); `fault PORT off` ends it.
//! * `shape PORT SPEC`, `shape PORT off`: the link model of PORT's egress (`egress.rs`): SPEC
//!   `rate-mbps=N,delay-us=N,buffer=BYTES[,kmin=BYTES,kmax=BYTES,pmax=P]`; frames to PORT
//!   leave at the line rate after the delay, drop when the buffer is full and are marked CE
//!   by RED between kmin and kmax. On the host's real clock: a model, not a simulation.
//! * `pfc PORT SPEC`, `pfc PORT off`: lossless mode for what comes in from PORT (`pfc.rs`):
//!   SPEC `xoff=BYTES,xon=BYTES[,quanta=N][,prio=DIGITS]`; when the bytes from PORT waiting
//!   in the link models' queues reach xoff, the switch sends PORT a PFC frame that pauses
//!   those priorities, and resumes them at xon. Only a NIC port obeys (`nic:N`); a VM's
//!   virtio-net ignores PFC frames, as a NIC without PFC does.
//! * `stats`: one line per switch port with its counters (a NIC port's also says how the bursts
//!   to it went: `direct_bursts` on the sending thread, `queued_bursts` through its engine
//!   thread's queue), then the switch's counters.
//! * `cc nic:N [SPEC]`: NIC N's congestion control (`rdma/congestion.rs`), changed by SPEC
//!   (`ecn=on,dcqcn=on,rpg_ai_rate=40,...`; refused whole if any part is bad), then shown as
//!   one line of every setting. Without SPEC, also what the NIC did: a line of its ECN, CNP
//!   and PFC counters and a line per QP DCQCN holds below line rate (rate, target, alpha).
//! * `sabotage nic:N write-byte=OFFSET`, `sabotage nic:N off`: TEST ONLY. While armed, NIC
//!   N's responder flips one bit of the byte at message offset OFFSET of every RDMA WRITE
//!   it places (`rdma/sabotage.rs`), to prove the data-checking tests catch corruption.
//!   Off by default; the reply names the state and the bytes corrupted so far.
//! * `sabotage nic:N admin=stall|admin=run`: TEST ONLY. NIC N's admin queue stops (resumes)
//!   answering, as a hung device.
//! * `sabotage nic:N fatal`: TEST ONLY. NIC N's engine enters its fatal state (manual,
//!   "Fatal errors") once, at its next step; the guest's reset of the engine ends it.
//! * `help`: the request syntax.
//!
//! PORT is `lan:N` (every port of the `N`th `--lan` socket, 0-based as in `--fault`, then
//! the `--interface`s in order; a VM reconnecting keeps the setting) or `nic:N` (the RoCE engine port of the `N`th NIC, as in
//! `--nic-fault`); a bare `N` means `lan:N`.
//!
//! Every reply ends with a line `ok` or `error: MESSAGE`; `stats` and `help` send their
//! lines before the `ok`. A bad request gets an error reply and the connection stays open;
//! blank lines are ignored. Nothing a client sends can panic the process: lines are bounded,
//! parsing returns errors, and the switch applies only parsed commands.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use thiserror::Error;

use super::egress::EgressConfig;
use super::fault::FaultConfig;
use super::pfc::PfcConfig;

/// The longest request line accepted; a longer one is answered with an error and skipped.
pub const MAX_LINE: usize = 1024;
/// Ports one `link` request may name.
pub const MAX_LINK_PORTS: usize = 16;
/// Concurrent control connections; more are refused.
pub const MAX_CLIENTS: usize = 8;

/// A port of the fabric as the control protocol names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortRef {
    /// The ports of the `N`th `--lan` socket.
    Lan(usize),
    /// The RoCE engine port of the `N`th NIC.
    Nic(usize),
}

impl std::fmt::Display for PortRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortRef::Lan(n) => write!(f, "lan:{n}"),
            PortRef::Nic(n) => write!(f, "nic:{n}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// One or more ports at once (a VM's whole cable: its `lan:` and its `nic:` port).
    Link {
        ports: Vec<PortRef>,
        up: bool,
    },
    /// `None`: no faults.
    Fault {
        port: PortRef,
        fault: Option<FaultConfig>,
    },
    /// `None`: no link model (frames go as fast as the host moves them).
    Shape {
        port: PortRef,
        shape: Option<EgressConfig>,
    },
    /// `None`: lossy (no flow control towards the port).
    Pfc {
        port: PortRef,
        pfc: Option<PfcConfig>,
    },
    /// Test only: arm (`Some(offset)`) or disarm NIC `nic`'s WRITE corruption knob.
    Sabotage {
        nic: usize,
        knob: SabotageKnob,
    },
    /// NIC `nic`'s congestion control: shown, or changed by `spec` (KEY=VALUE,...).
    Cc {
        nic: usize,
        spec: Option<String>,
    },
    Stats,
    Help,
}

/// A test-only fault of one NIC (`rdma/sabotage.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SabotageKnob {
    /// Corrupt this byte of every RDMA WRITE placed (`None`: off).
    WriteByte(Option<u64>),
    /// Stop (`true`) or resume answering admin commands.
    AdminStall(bool),
    /// Enter the fatal state once.
    Fatal,
}

#[derive(Debug, Error, PartialEq)]
pub enum ParseError {
    #[error("unknown command {0:?} (try help)")]
    Unknown(String),
    #[error("usage: {0}")]
    Usage(&'static str),
    #[error("port {0:?}: expected lan:N, nic:N or N")]
    Port(String),
    #[error(transparent)]
    Fault(#[from] super::fault::FaultError),
    #[error(transparent)]
    Shape(#[from] super::egress::EgressError),
    #[error(transparent)]
    Pfc(#[from] super::pfc::PfcError),
}

pub const HELP: &[&str] = &[
    "link PORT... up|down",
    "fault PORT SPEC|off    SPEC: drop=P,dup=P,reorder=P,delay=P,delay-ms=MS,ce=P",
    "shape PORT SPEC|off    SPEC: rate-mbps=N,delay-us=N,buffer=BYTES[,kmin=BYTES,kmax=BYTES,pmax=P] (link model: line rate, buffer, ECN marking)",
    "pfc PORT SPEC|off    SPEC: xoff=BYTES,xon=BYTES[,quanta=N][,prio=DIGITS] (lossless: pause PORT when what it sent fills the queues)",
    "stats",
    "cc nic:N [KEY=VALUE,...]    congestion control of NIC N: ecn, dcqcn (on|off), line-mbps, DCQCN's roce_np/roce_rp parameters",
    "sabotage nic:N write-byte=OFFSET|off    TEST ONLY: corrupt byte OFFSET of every RDMA WRITE NIC N places",
    "sabotage nic:N admin=stall|admin=run    TEST ONLY: NIC N's admin queue stops (resumes) answering",
    "sabotage nic:N fatal    TEST ONLY: NIC N's engine fails fatally (until the guest resets it)",
    "PORT: lan:N (the Nth --lan socket), nic:N (the Nth NIC's RoCE engine), N = lan:N",
];

fn parse_port(s: &str) -> Result<PortRef, ParseError> {
    let bad = || ParseError::Port(s.to_string());
    let (kind, n) = match s.split_once(':') {
        Some((k, n)) => (k, n),
        None => ("lan", s),
    };
    // Digits only: u64 parsing would accept a leading '+'.
    if n.is_empty() || n.len() > 6 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: usize = n.parse().map_err(|_| bad())?;
    match kind {
        "lan" => Ok(PortRef::Lan(n)),
        "nic" => Ok(PortRef::Nic(n)),
        _ => Err(bad()),
    }
}

/// `CMD PORT SPEC|off`: the port and the parsed SPEC (`None` for `off`).
fn port_spec<T, E>(
    words: &[&str],
    usage: &'static str,
    parse: impl FnOnce(&str) -> Result<T, E>,
) -> Result<(PortRef, Option<T>), ParseError>
where
    ParseError: From<E>,
{
    let [_, port, spec] = words else {
        return Err(ParseError::Usage(usage));
    };
    let port = parse_port(port)?;
    Ok((
        port,
        if *spec == "off" {
            None
        } else {
            Some(parse(spec)?)
        },
    ))
}

/// Parses one request line (without its newline). `Ok(None)` for a blank line.
pub fn parse(line: &str) -> Result<Option<Command>, ParseError> {
    let words: Vec<&str> = line.split_ascii_whitespace().collect();
    let Some(&cmd) = words.first() else {
        return Ok(None);
    };
    let cmd = match cmd {
        "link" => match words[1..] {
            [ref ports @ .., state] if !ports.is_empty() && ports.len() <= MAX_LINK_PORTS => {
                let up = match state {
                    "up" => true,
                    "down" => false,
                    _ => return Err(ParseError::Usage("link PORT... up|down")),
                };
                Command::Link {
                    ports: ports
                        .iter()
                        .map(|p| parse_port(p))
                        .collect::<Result<_, _>>()?,
                    up,
                }
            }
            _ => return Err(ParseError::Usage("link PORT... up|down (1..=16 ports)")),
        },
        "fault" => {
            let (port, fault) = port_spec(&words, "fault PORT SPEC|off", FaultConfig::parse)?;
            Command::Fault { port, fault }
        }
        "shape" => {
            let (port, shape) = port_spec(&words, "shape PORT SPEC|off", EgressConfig::parse)?;
            Command::Shape { port, shape }
        }
        "pfc" => {
            let (port, pfc) = port_spec(&words, "pfc PORT SPEC|off", PfcConfig::parse)?;
            Command::Pfc { port, pfc }
        }
        "sabotage" => {
            const USAGE: &str = "sabotage nic:N write-byte=OFFSET|off|admin=stall|admin=run|fatal";
            let [port, what] = words[1..] else {
                return Err(ParseError::Usage(USAGE));
            };
            let PortRef::Nic(nic) = parse_port(port)? else {
                return Err(ParseError::Usage(USAGE));
            };
            let knob = match what.strip_prefix("write-byte=") {
                _ if what == "off" => SabotageKnob::WriteByte(None),
                _ if what == "admin=stall" => SabotageKnob::AdminStall(true),
                _ if what == "admin=run" => SabotageKnob::AdminStall(false),
                _ if what == "fatal" => SabotageKnob::Fatal,
                // Digits only (no sign), and no more than fit a u64.
                Some(n)
                    if !n.is_empty() && n.len() <= 19 && n.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    SabotageKnob::WriteByte(Some(n.parse().map_err(|_| ParseError::Usage(USAGE))?))
                }
                _ => return Err(ParseError::Usage(USAGE)),
            };
            Command::Sabotage { nic, knob }
        }
        "cc" => {
            const USAGE: &str = "cc nic:N [KEY=VALUE,...]";
            let (port, spec) = match words[1..] {
                [port] => (port, None),
                [port, spec] => (port, Some(spec.to_string())),
                _ => return Err(ParseError::Usage(USAGE)),
            };
            let PortRef::Nic(nic) = parse_port(port)? else {
                return Err(ParseError::Usage(USAGE));
            };
            Command::Cc { nic, spec }
        }
        "stats" if words.len() == 1 => Command::Stats,
        "stats" => return Err(ParseError::Usage("stats")),
        "help" => Command::Help,
        other => {
            let mut shown: String = other.chars().take(32).collect();
            if shown.len() < other.len() {
                shown.push_str("...");
            }
            return Err(ParseError::Unknown(shown));
        }
    };
    Ok(Some(cmd))
}

/// What applying a command gave: lines to show, then `ok`, or an error message.
pub type Reply = Result<Vec<String>, String>;

/// Applies commands to the running fabric (implemented by the hub's handle).
pub trait Apply: Send + Sync + 'static {
    fn apply(&self, cmd: Command) -> Reply;
}

fn write_reply(out: &mut impl Write, reply: &Reply) -> std::io::Result<()> {
    let mut text = String::new();
    match reply {
        Ok(lines) => {
            for l in lines {
                text.push_str(l);
                text.push('\n');
            }
            text.push_str("ok\n");
        }
        Err(e) => {
            // One line, whatever the message holds.
            text.push_str("error: ");
            text.push_str(&e.replace(['\n', '\r'], " "));
            text.push('\n');
        }
    }
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// Answers one line of input (already split off, without the newline).
pub fn handle_line(raw: &[u8], target: &dyn Apply) -> Option<Reply> {
    let Ok(line) = std::str::from_utf8(raw) else {
        return Some(Err("the request is not UTF-8".to_string()));
    };
    match parse(line.trim_end_matches('\r')) {
        Ok(None) => None,
        Ok(Some(Command::Help)) => Some(Ok(HELP.iter().map(|s| s.to_string()).collect())),
        Ok(Some(cmd)) => Some(target.apply(cmd)),
        Err(e) => Some(Err(e.to_string())),
    }
}

/// Serves one client until it closes: reads lines (bounded), answers each.
pub fn serve_client(stream: impl Read + Write, target: &dyn Apply) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        // Read at most MAX_LINE + 1 bytes of this line; a longer line is skipped to its end.
        let n = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(());
        }
        let complete = line.last() == Some(&b'\n');
        if !complete && line.len() > MAX_LINE {
            loop {
                let mut skipped = Vec::new();
                let m = (&mut reader)
                    .take(MAX_LINE as u64)
                    .read_until(b'\n', &mut skipped)?;
                if m == 0 || skipped.last() == Some(&b'\n') {
                    break;
                }
            }
            let reply = Err(format!("request longer than {MAX_LINE} bytes"));
            write_reply(reader.get_mut(), &reply)?;
            continue;
        }
        if complete {
            line.pop();
        }
        if let Some(reply) = handle_line(&line, target) {
            write_reply(reader.get_mut(), &reply)?;
        }
        if !complete {
            return Ok(()); // end of stream after an unterminated last line
        }
    }
}

/// Accepts control clients on `listener` for the life of the process (a thread each, at most
/// [`MAX_CLIENTS`] at a time).
pub fn spawn_server(listener: UnixListener, target: Arc<dyn Apply>) -> std::io::Result<()> {
    let live = Arc::new(AtomicUsize::new(0));
    thread::Builder::new()
        .name("fabric-control".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let stream: UnixStream = match conn {
                    Ok(s) => s,
                    Err(e) => {
                        log::warn!("control: accept: {e}");
                        continue;
                    }
                };
                if live.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
                    live.fetch_sub(1, Ordering::SeqCst);
                    let mut s = stream;
                    let _ = write_reply(&mut s, &Err("too many control clients".into()));
                    continue;
                }
                let target = Arc::clone(&target);
                let live2 = Arc::clone(&live);
                let spawned = thread::Builder::new()
                    .name("fabric-control-client".into())
                    .spawn(move || {
                        if let Err(e) = serve_client(stream, &*target) {
                            log::debug!("control client: {e}");
                        }
                        live2.fetch_sub(1, Ordering::SeqCst);
                    });
                if let Err(e) = spawned {
                    log::warn!("control: spawning a client thread: {e}");
                    live.fetch_sub(1, Ordering::SeqCst);
                }
            }
        })
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Mutex;

    #[test]
    fn requests_parse() {
        assert_eq!(
            parse("link 1 down"),
            Ok(Some(Command::Link {
                ports: vec![PortRef::Lan(1)],
                up: false
            }))
        );
        assert_eq!(
            parse("  link   nic:0 up \t"),
            Ok(Some(Command::Link {
                ports: vec![PortRef::Nic(0)],
                up: true
            }))
        );
        assert_eq!(
            parse("fault lan:2 drop=0.5,delay=1,delay-ms=3"),
            Ok(Some(Command::Fault {
                port: PortRef::Lan(2),
                fault: Some(FaultConfig::parse("drop=0.5,delay=1,delay-ms=3").unwrap())
            }))
        );
        assert_eq!(
            parse("sabotage nic:1 write-byte=4097"),
            Ok(Some(Command::Sabotage {
                nic: 1,
                knob: SabotageKnob::WriteByte(Some(4097))
            }))
        );
        assert_eq!(
            parse("sabotage nic:0 off"),
            Ok(Some(Command::Sabotage {
                nic: 0,
                knob: SabotageKnob::WriteByte(None)
            }))
        );
        assert_eq!(
            parse("sabotage nic:2 admin=stall"),
            Ok(Some(Command::Sabotage {
                nic: 2,
                knob: SabotageKnob::AdminStall(true)
            }))
        );
        assert_eq!(
            parse("sabotage nic:2 admin=run"),
            Ok(Some(Command::Sabotage {
                nic: 2,
                knob: SabotageKnob::AdminStall(false)
            }))
        );
        assert_eq!(
            parse("sabotage nic:1 fatal"),
            Ok(Some(Command::Sabotage {
                nic: 1,
                knob: SabotageKnob::Fatal
            }))
        );
        assert!(parse("sabotage nic:2 admin=maybe").is_err());
        assert!(parse("sabotage nic:2 fatal=1").is_err());
        assert_eq!(
            parse("fault nic:1 off"),
            Ok(Some(Command::Fault {
                port: PortRef::Nic(1),
                fault: None
            }))
        );
        assert_eq!(
            parse("link lan:1 nic:1 down"),
            Ok(Some(Command::Link {
                ports: vec![PortRef::Lan(1), PortRef::Nic(1)],
                up: false
            }))
        );
        assert_eq!(
            parse("pfc nic:1 xoff=65536,xon=32768"),
            Ok(Some(Command::Pfc {
                port: PortRef::Nic(1),
                pfc: Some(PfcConfig {
                    xoff: 65536,
                    xon: 32768,
                    ..PfcConfig::default()
                })
            }))
        );
        assert_eq!(
            parse("pfc nic:0 off"),
            Ok(Some(Command::Pfc {
                port: PortRef::Nic(0),
                pfc: None
            }))
        );
        assert_eq!(parse("stats"), Ok(Some(Command::Stats)));
        assert_eq!(parse(""), Ok(None));
        assert_eq!(parse("   "), Ok(None));
    }

    #[test]
    fn bad_requests_are_errors() {
        for bad in [
            "link",
            "link 1",
            "link 1 sideways",
            "link 1 down now",
            "link x down",
            "link lan: down",
            "link lan:-1 down",
            "link +1 down",
            "link vm:1 down",
            "link 99999999999999999999 down",
            "link up",
            "link 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 down",
            "link 1 x down",
            "fault 1",
            "sabotage",
            "sabotage nic:0",
            "sabotage lan:0 write-byte=1",
            "sabotage nic:0 write-byte=",
            "sabotage nic:0 write-byte=-1",
            "sabotage nic:0 write-byte=+1",
            "sabotage nic:0 write-byte=99999999999999999999",
            "sabotage nic:0 read-byte=1",
            "sabotage nic:0 write-byte=1 extra",
            "fault 1 drop=2",
            "fault 1 drop",
            "fault 1 loss=0.1",
            "fault 1 drop=NaN",
            "stats now",
            "pfc",
            "pfc nic:0",
            "pfc nic:0 xoff=10,xon=20",
            "pfc nic:0 xoff=10,xon=5,quanta=0",
            "pfc nic:0 xoff=10,xon=5 extra",
            "reboot",
            "LINK 1 down",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    /// Records the commands it was given; answers ok.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<Command>>);

    impl Apply for Recorder {
        fn apply(&self, cmd: Command) -> Reply {
            self.0.lock().unwrap().push(cmd);
            Ok(Vec::new())
        }
    }

    /// A stream: input bytes, output collected.
    struct Pipe {
        input: std::io::Cursor<Vec<u8>>,
        output: Vec<u8>,
    }

    impl Read for Pipe {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.input.read(buf)
        }
    }

    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.output.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn converse(input: &[u8]) -> (String, Vec<Command>) {
        let rec = Recorder::default();
        let mut pipe = Pipe {
            input: std::io::Cursor::new(input.to_vec()),
            output: Vec::new(),
        };
        serve_client(&mut pipe, &rec).unwrap();
        let cmds = rec.0.lock().unwrap().clone();
        (String::from_utf8(pipe.output).unwrap(), cmds)
    }

    #[test]
    fn a_session_answers_every_line_and_survives_garbage() {
        let mut input = b"link 1 down\n\nbogus\n".to_vec();
        input.extend(vec![b'x'; 5000]);
        input.extend(b"\n\xff\xfe\nlink nic:0 up\r\nhelp\nstats".to_vec());
        let (out, cmds) = converse(&input);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "ok");
        assert!(lines[1].starts_with("error: unknown command \"bogus\""));
        assert_eq!(lines[2], "error: request longer than 1024 bytes");
        assert_eq!(lines[3], "error: the request is not UTF-8");
        assert_eq!(lines[4], "ok");
        assert_eq!(lines[5], HELP[0]);
        assert_eq!(lines[lines.len() - 2], "ok", "help ends with ok");
        assert_eq!(lines[lines.len() - 1], "ok", "stats without newline at EOF");
        assert_eq!(
            cmds,
            vec![
                Command::Link {
                    ports: vec![PortRef::Lan(1)],
                    up: false
                },
                Command::Link {
                    ports: vec![PortRef::Nic(0)],
                    up: true
                },
                Command::Stats
            ]
        );
    }

    proptest! {
        #[test]
        fn any_input_gets_replies_and_never_panics(input in proptest::collection::vec(any::<u8>(), 0..3000)) {
            let (out, _) = converse(&input);
            for l in out.lines() {
                prop_assert!(!l.is_empty());
            }
        }

        #[test]
        fn wordy_input_never_panics(line in "(link|fault|stats|help|sabotage|write-byte=[0-9]{1,3}|lan:|nic:|[0-9]{1,3}|up|down|off|drop=0.[0-9]|delay-ms=[0-9]+|,| |\t){0,12}") {
            let _ = parse(&line);
        }
    }
}
