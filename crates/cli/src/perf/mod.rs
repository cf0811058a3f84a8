//! `rverbs perf {send|write|read|atomic|tcp} {bw|lat} [SERVER]`: perftest-like
//! benchmarks between two processes, and the same measurements over a plain TCP
//! socket as the baseline.
//!
//! **Process layout.** The server (no SERVER argument) listens on a TCP port for the
//! control connection; the client connects, both sides agree on the test (they must
//! have been started with the same test and options), exchange their QP / memory
//! details (or open a second TCP connection for `tcp`), and then run every message
//! size in turn: `run` → `ready`, the traffic, `done sent=N` from each side once its
//! own sends completed, and `stats` (each side's CPU time and counts). Both sides
//! print the results.
//!
//! **What is measured.** Bandwidth tests time each sending side from its first post to
//! its last completion (bidirectional: the slower side), count the messages both sides
//! sent, and report Gbit/s and messages/s. Latency tests record every iteration on the
//! client: half the round trip for SEND and WRITE ping-pong (as perftest's
//! `ib_send_lat`/`ib_write_lat`), the whole round trip for READ and atomics. CPU is
//! `getrusage(RUSAGE_SELF)` user + system time of each whole process over the test
//! (driver threads included); "CPU s/GB" adds both processes' CPU time.
//!
//! **perftest's own exchange:** `--perftest` (`perftest.rs`) speaks it instead of ours,
//! in either role, with perftest's `ib_{write,send,read,atomic}_{bw,lat}`; the README
//! says what is not spoken.

pub mod ctrl;
pub mod perftest;
mod rdma;
mod report;
mod tcp;

use report::Meter;
pub use report::{Lat, Recovery, Report, Side};

use crate::json::Json;
use ctrl::{Ctrl, Msg};
use std::io::{IsTerminal, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The operation measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// RC SEND/RECV.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// Atomic fetch-and-add, or compare-and-swap with `-A CMP_AND_SWAP` (8 bytes).
    Atomic,
    /// A plain TCP socket (the baseline).
    Tcp,
}

impl Op {
    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::Write => "write",
            Op::Read => "read",
            Op::Atomic => "atomic",
            Op::Tcp => "tcp",
        }
    }

    /// From the command-line name.
    pub fn from_name(s: &str) -> Option<Op> {
        [Op::Send, Op::Write, Op::Read, Op::Atomic, Op::Tcp]
            .into_iter()
            .find(|o| o.name() == s)
    }
}

/// Bandwidth or latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Streaming with `depth` outstanding messages.
    Bw,
    /// One message at a time.
    Lat,
}

impl Kind {
    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Bw => "bw",
            Kind::Lat => "lat",
        }
    }
}

/// Options (perftest's letters where perftest has them).
#[derive(Debug, Clone)]
pub struct Opts {
    /// Operation.
    pub op: Op,
    /// Test kind.
    pub kind: Kind,
    /// Server to connect to; `None` = be the server.
    pub server: Option<String>,
    /// TCP port of the control connection (`-p`).
    pub port: u16,
    /// Device (`-d`); default: the loopback soft device.
    pub dev: Option<String>,
    /// Message size (`-s`).
    pub size: usize,
    /// `-s` was given (not the default): over UD perftest then refuses a size above
    /// the MTU instead of lowering it.
    pub size_given: bool,
    /// Sweep sizes 2 B .. 8 MiB (`-a`).
    pub all: bool,
    /// Iterations per size (`-n`).
    pub iters: u64,
    /// Run each size for this long instead (`-D`, seconds).
    pub duration: Option<f64>,
    /// Outstanding messages (`-t`).
    pub depth: usize,
    /// Requests per post (`-l`).
    pub post_list: usize,
    /// Completion moderation (`-Q`, perftest's `--cq-mod`): signal one send in this
    /// many, and the last. `None`: latency tests signal every send (as perftest's, see
    /// [`DEF_CQ_MOD`]), bandwidth tests one in a quarter of the depth (at most 16).
    pub cq_mod: Option<usize>,
    /// Both sides send (`-b`, bandwidth tests).
    pub bidir: bool,
    /// SEND and WRITE messages of at most this size go INLINE (`-I`, 0: none).
    pub inline_size: usize,
    /// Path MTU in bytes (`-m`; 0: the port's active MTU).
    pub mtu: usize,
    /// GID index (`-x`); default: one of the peer's address family.
    pub gid_idx: Option<u8>,
    /// How long a waiting thread busy-polls before it sleeps until the next datagram
    /// (`--spin-us`; see `rverbs::Cq::wait`).
    pub spin: Duration,
    /// Atomics are compare-and-swap (`-A CMP_AND_SWAP`: compare 0, swap 0, as
    /// perftest's) instead of fetch-and-add 1.
    pub cmp_swap: bool,
    /// QPs (`-q`; with `--perftest`, for the bandwidth tools): each sends `iters`
    /// messages with `depth` outstanding.
    pub qps: usize,
    /// The transport (`-c`): RC; with `--perftest` also UC (SEND and WRITE tools) and
    /// UD (SEND tools, messages of at most one MTU).
    pub transport: rverbs::QpType,
    /// Speak perftest's own exchange (an unmodified perftest tool is the peer).
    pub perftest: bool,
    /// Connect through the RDMA CM, as perftest's `-R` (implies `perftest`).
    pub rdma_cm: bool,
    /// The RC QPs' local ACK timeout exponent (`--ack-timeout`, IBTA 9.7.6.1.3).
    pub ack_timeout: u8,
    /// The RC QPs' retry count (`--retry-count`, 0..=7).
    pub retry_count: u8,
    /// Print JSON lines instead of the table.
    pub json: bool,
}

/// perftest's default completion moderation (`DEF_CQ_MOD`, `perftest_parameters.h`).
/// perftest caps it at the TX depth (`force_dependecies`), which its latency tools
/// leave at `DEF_TX_LAT` = 1: `ib_send_lat` signals every SEND unless given `-t` and
/// `-Q`. `rverbs perf` latency tests do the same by default (every send signaled);
/// `-Q N` moderates, capped at `-t` as perftest caps it.
pub const DEF_CQ_MOD: usize = 100;

impl Opts {
    /// The latency tests' completion moderation: `-Q` capped at the depth, as perftest
    /// does; without `-Q`, 1 (perftest's effective default for its latency tools,
    /// whose TX depth is 1).
    pub fn lat_cq_mod(&self) -> u64 {
        self.cq_mod.unwrap_or(1).clamp(1, self.depth.max(1)) as u64
    }
}

/// The sizes one run measures.
pub fn sizes(o: &Opts) -> Vec<usize> {
    if o.op == Op::Atomic {
        return vec![8];
    }
    if o.all {
        (1..=23).map(|p| 1usize << p).collect()
    } else {
        vec![o.size.max(1)]
    }
}

/// Process CPU time (user + system, all threads) in seconds.
pub fn cpu_seconds() -> f64 {
    rverbs_sys::misc::cpu_seconds()
}

/// The peer's `done sent=N`, delivered by the control reader thread.
pub struct PeerDone {
    v: AtomicU64,
}

const UNKNOWN: u64 = u64::MAX;
const FAILED: u64 = u64::MAX - 1;

impl PeerDone {
    fn new() -> PeerDone {
        PeerDone {
            v: AtomicU64::new(UNKNOWN),
        }
    }

    /// `Ok(Some(n))` once the peer said it sent `n` messages; an error if the control
    /// connection failed.
    pub fn get(&self) -> Result<Option<u64>, String> {
        match self.v.load(Ordering::Acquire) {
            UNKNOWN => Ok(None),
            FAILED => Err("the control connection failed during the test".into()),
            n => Ok(Some(n)),
        }
    }

    fn set(&self, n: u64) {
        self.v.store(n.min(FAILED - 1), Ordering::Release);
    }
}

/// How long a test may make no progress before it is declared stuck.
pub const STALL: Duration = Duration::from_secs(30);

/// How long a handshake step (control messages before and after a run, pingpong's
/// address exchange) may wait for the peer: a peer that connects and says nothing is an
/// error, not a hang. Waits that last a whole run have none.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);
/// For tests: the handshake timeout in milliseconds instead of [`HANDSHAKE_TIMEOUT`].
const HANDSHAKE_TIMEOUT_ENV: &str = "RVERBS_HANDSHAKE_TIMEOUT_MS";

/// [`HANDSHAKE_TIMEOUT`], or the one `RVERBS_HANDSHAKE_TIMEOUT_MS` sets (checked at
/// start-up by [`check_env`]).
pub fn handshake_timeout() -> Duration {
    timeout_ms(
        HANDSHAKE_TIMEOUT_ENV,
        std::env::var(HANDSHAKE_TIMEOUT_ENV).ok().as_deref(),
    )
    .ok()
    .flatten()
    .unwrap_or(HANDSHAKE_TIMEOUT)
}

/// A timeout variable's value: unset or empty is `None`; else a whole number of
/// milliseconds, at least 1 (a zero socket timeout is refused by the kernel).
pub fn timeout_ms(var: &str, v: Option<&str>) -> Result<Option<Duration>, String> {
    match v {
        None | Some("") => Ok(None),
        Some(s) => match s.parse::<u64>() {
            Ok(ms) if ms >= 1 => Ok(Some(Duration::from_millis(ms))),
            _ => Err(format!(
                "{var}: {s:?}: expected a whole number of milliseconds, at least 1"
            )),
        },
    }
}

/// Checks the tool's own environment variables once, at start-up, so a bad value is
/// an error instead of a silent fall back to the default.
pub fn check_env() -> Result<(), String> {
    for var in [HANDSHAKE_TIMEOUT_ENV, perftest::PEER_TIMEOUT_ENV] {
        timeout_ms(var, std::env::var(var).ok().as_deref())?;
    }
    Ok(())
}

/// What one side does for one size.
pub struct Plan {
    /// Message size.
    pub size: usize,
    /// Messages to send (`None`: until `until`).
    pub iters: Option<u64>,
    /// Stop sending at this instant (duration mode).
    pub until: Option<Instant>,
    /// This side sends (bw) / drives the ping-pong (lat client).
    pub sends: bool,
    /// The peer sends SENDs / TCP data that this side must receive.
    pub receives: bool,
    /// Progress display on stderr.
    pub progress: bool,
}

impl Plan {
    /// True once this side has sent `posted` and should stop.
    pub fn stop(&self, posted: u64) -> bool {
        match (self.iters, self.until) {
            (Some(n), _) => posted >= n,
            (None, Some(t)) => Instant::now() >= t,
            (None, None) => true,
        }
    }
}

/// Throttled progress line on stderr.
pub struct Progress {
    on: bool,
    last: Instant,
    size: usize,
}

impl Progress {
    fn new(on: bool, size: usize) -> Progress {
        Progress {
            on,
            last: Instant::now(),
            size,
        }
    }

    /// Shows `done` of `total` (when known) at most 4 times a second.
    pub fn tick(&mut self, done: u64, total: Option<u64>) {
        if !self.on || self.last.elapsed() < Duration::from_millis(250) {
            return;
        }
        self.last = Instant::now();
        match total {
            Some(t) => eprint!("\r  {} B: {done}/{t}   ", self.size),
            None => eprint!("\r  {} B: {done}   ", self.size),
        }
    }

    fn clear(&self) {
        if self.on {
            eprint!("\r{:60}\r", "");
        }
    }
}

/// One transport's data movers.
pub trait Bench {
    /// Bandwidth for one size; sends `done sent=N` on `ctrl` once its own sends
    /// completed, and returns when the peer's sends have arrived too.
    fn bw(
        &mut self,
        plan: &Plan,
        peer: &PeerDone,
        ctrl: &mut TcpStream,
        p: &mut Progress,
    ) -> Result<Side, String>;
    /// Latency for one size; the client returns its samples (ns).
    fn lat(
        &mut self,
        plan: &Plan,
        peer: &PeerDone,
        ctrl: &mut TcpStream,
        p: &mut Progress,
    ) -> Result<(Side, Vec<u64>), String>;
    /// Packets this side has sent again so far (go-back-N retransmissions of the RC
    /// requester and READ responses a responder replays; TCP's retransmitted
    /// segments); the difference over a test goes
    /// into its [`Side`].
    fn resent(&self) -> u64;
    /// The RC loss-recovery events so far (none for TCP).
    fn recovery(&self) -> Recovery {
        Recovery::default()
    }
}

fn hello(o: &Opts) -> Msg {
    Msg::new("hello")
        .with("v", 1)
        .with("op", o.op.name())
        .with("kind", o.kind.name())
        .with("depth", o.depth)
        .with("post_list", o.post_list)
        .with("bidir", u8::from(o.bidir))
        .with("all", u8::from(o.all))
        .with("size", o.size)
        .with("mtu", o.mtu)
}

/// The fields both sides must agree on.
fn check_hello(mine: &Msg, theirs: &Msg) -> Result<(), String> {
    for k in [
        "v",
        "op",
        "kind",
        "depth",
        "post_list",
        "bidir",
        "all",
        "size",
        "mtu",
    ] {
        let (a, b) = (mine.str(k)?, theirs.str(k)?);
        if a != b {
            return Err(format!(
                "the peer runs a different test: {k}={b} there, {k}={a} here"
            ));
        }
    }
    Ok(())
}

/// Connects the control channel and checks the peer runs the same test.
fn control(o: &Opts) -> Result<(Ctrl, Option<SocketAddr>, Option<TcpListener>), String> {
    let (s, addr, listener) = match &o.server {
        Some(server) => {
            let addrs: Vec<SocketAddr> = (server.as_str(), o.port)
                .to_socket_addrs()
                .map_err(|e| format!("{server}: {e}"))?
                .collect();
            let mut found = None;
            // The server may still be starting: retry for a few seconds.
            let deadline = Instant::now() + Duration::from_secs(10);
            while found.is_none() {
                for a in &addrs {
                    if let Ok(s) = TcpStream::connect_timeout(a, Duration::from_secs(2)) {
                        found = Some((s, *a));
                        break;
                    }
                }
                if found.is_none() {
                    if Instant::now() > deadline {
                        return Err(format!("couldn't connect to {server}:{}", o.port));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            let (s, a) = found.ok_or("no address")?;
            (s, Some(a), None)
        }
        None => {
            let l = TcpListener::bind(("::", o.port))
                .or_else(|_| TcpListener::bind(("0.0.0.0", o.port)))
                .map_err(|e| format!("couldn't listen on port {}: {e}", o.port))?;
            let (s, peer) = l.accept().map_err(|e| e.to_string())?;
            // The TCP baseline accepts its data connection on the same listener.
            (s, Some(peer), Some(l))
        }
    };
    s.set_read_timeout(Some(handshake_timeout()))
        .map_err(|e| e.to_string())?;
    // The wait for the peer's `done` has no timeout: keepalive ends it if the peer's
    // host vanishes (60 s idle, then 6 probes 10 s apart).
    let k = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(60))
        .with_interval(Duration::from_secs(10))
        .with_retries(6);
    let _ = socket2::SockRef::from(&s).set_tcp_keepalive(&k);
    let mut c = Ctrl::new(s)?;
    let mine = hello(o);
    c.send(&mine)?;
    let theirs = c.recv()?.expect("hello")?;
    if let Err(e) = check_hello(&mine, &theirs) {
        let _ = c.send(&Msg::new("error").with("why", e.replace(' ', "_")));
        return Err(e);
    }
    Ok((c, addr, listener))
}

/// Runs one side of a test, printing to `out`.
pub fn run(o: &Opts, out: &mut impl Write) -> Result<Vec<Report>, String> {
    if o.kind == Kind::Lat && o.bidir {
        return Err("-b (bidirectional) applies to bandwidth tests".into());
    }
    if o.depth == 0 || o.post_list == 0 || o.post_list > o.depth {
        return Err("need 1 <= post-list (-l) <= depth (-t)".into());
    }
    // -R is perftest's mode: it implies its exchange.
    if o.perftest || o.rdma_cm {
        return perftest::run(o, out);
    }
    if o.qps > 1 {
        return Err(
            "-q is spoken with --perftest only (perftest's multi-QP bandwidth tests)".into(),
        );
    }
    if o.transport != rverbs::QpType::Rc {
        // rverbs' own SEND bandwidth test reposts receives as they complete, which a
        // UC or UD sender may outrun (a message that finds no receive is lost, not
        // retried).
        return Err("-c UC/UD is spoken with --perftest only (perftest's UC and UD tests)".into());
    }
    let client = o.server.is_some();
    let (mut c, peer_addr, listener) = control(o)?;
    let sizes = sizes(o);
    let max = *sizes.iter().max().unwrap_or(&1);
    let mut bench: Box<dyn Bench> = match o.op {
        Op::Tcp => Box::new(tcp::Tcp::connect(o, peer_addr, listener, max)?),
        _ => Box::new(rdma::Rdma::connect(o, &mut c, peer_addr, max)?),
    };
    let progress = std::io::stderr().is_terminal() && !o.json;
    let w = |r: std::io::Result<()>| r.map_err(|e| e.to_string());
    if !o.json {
        w(writeln!(out, "{}", header(o)))?;
    }
    let mut reports = Vec::new();
    for &size in &sizes {
        let dur_ms = o.duration.map_or(0, |d| (d * 1000.0) as u64);
        if client {
            c.send(
                &Msg::new("run")
                    .with("size", size)
                    .with("iters", o.iters)
                    .with("dur_ms", dur_ms),
            )?;
            c.recv()?.expect("ready")?;
        } else {
            let m = c.recv()?.expect("run")?;
            if m.u64("size")? != size as u64 {
                return Err("the peer's size sequence differs".into());
            }
            c.send(&Msg::new("ready"))?;
        }
        let plan = Plan {
            size,
            iters: o.duration.is_none().then_some(o.iters),
            until: o
                .duration
                .map(|d| Instant::now() + Duration::from_secs_f64(d)),
            sends: match o.kind {
                Kind::Bw => client || o.bidir,
                Kind::Lat => client,
            },
            receives: matches!(o.op, Op::Send | Op::Tcp) && (!client || o.bidir),
            progress,
        };
        let peer = PeerDone::new();
        let mut prog = Progress::new(progress, size);
        // The peer's `done` comes at the end of its run, however long that is (-D):
        // no read timeout meanwhile (the stream's clones share the socket's).
        let _ = c.w.set_read_timeout(None);
        let Ctrl { w: cw, r: cr } = &mut c;
        let result = std::thread::scope(|sc| {
            let reader = sc.spawn(|| {
                let r = ctrl::read_msg(cr)
                    .and_then(|m| m.expect("done"))
                    .and_then(|m| m.u64("sent"));
                match r {
                    Ok(n) => peer.set(n),
                    Err(_) => peer.v.store(FAILED, Ordering::Release),
                }
            });
            let (resent0, rec0) = (bench.resent(), bench.recovery());
            let res = match o.kind {
                Kind::Bw => bench
                    .bw(&plan, &peer, cw, &mut prog)
                    .map(|s| (s, Vec::new())),
                Kind::Lat => bench.lat(&plan, &peer, cw, &mut prog),
            }
            .map(|(me, samples)| {
                let resent = bench.resent().saturating_sub(resent0);
                let recovery = bench.recovery().since(rec0);
                (
                    Side {
                        resent,
                        recovery,
                        ..me
                    },
                    samples,
                )
            });
            if res.is_err() {
                let _ = cw.shutdown(std::net::Shutdown::Both);
            }
            let _ = reader.join();
            res
        });
        prog.clear();
        let _ = c.w.set_read_timeout(Some(handshake_timeout()));
        let (me, mut samples) = result?;
        c.send(&me.msg())?;
        let them = Side::from_msg(&c.recv()?.expect("stats")?)?;
        let r = Report::new(size, &me, &them, Lat::of(&mut samples));
        if o.json {
            w(writeln!(out, "{}", r.json(o).render()))?;
        } else {
            w(writeln!(out, "{}", row(o, &r)))?;
        }
        if r.resent > 0 {
            // Not a figure of the table, but it explains a low one.
            eprintln!(
                "# {} B: {} packets sent again (loss, or a receive buffer that overflowed)",
                size, r.resent
            );
        }
        if r.recovery.any() {
            eprintln!("# {} B: loss recovery: {}", size, r.recovery);
        }
        reports.push(r);
    }
    Ok(reports)
}

fn header(o: &Opts) -> String {
    match o.kind {
        Kind::Bw => format!(
            "# {} bw{}: depth {}, post list {}\n {:>9} {:>12} {:>12} {:>12} {:>9} {:>10}",
            o.op.name(),
            if o.bidir { " (bidirectional)" } else { "" },
            o.depth,
            o.post_list,
            "#bytes",
            "#messages",
            "BW[Gb/s]",
            "MsgRate[Mpps]",
            "CPU[%]",
            "CPU[s/GB]"
        ),
        Kind::Lat => format!(
            "# {} lat ({})\n {:>9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
            o.op.name(),
            match o.op {
                Op::Read | Op::Atomic => "round trip, usec",
                _ => "half round trip, usec",
            },
            "#bytes",
            "#iters",
            "t_min",
            "t_p50",
            "t_p99",
            "t_p99.9",
            "t_max",
            "t_avg",
            "CPU[%]"
        ),
    }
}

fn row(o: &Opts, r: &Report) -> String {
    match (o.kind, &r.lat) {
        (Kind::Lat, Some(l)) => format!(
            " {:>9} {:>10} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>7.1}",
            r.size,
            r.msgs,
            l.min,
            l.p50,
            l.p99,
            l.p999,
            l.max,
            l.avg,
            r.cpu_util * 100.0
        ),
        (Kind::Lat, None) => format!(
            " {:>9} {:>10} (latencies are reported by the client) CPU {:.1}%",
            r.size,
            r.msgs,
            r.cpu_util * 100.0
        ),
        (Kind::Bw, _) => format!(
            " {:>9} {:>12} {:>12.3} {:>12.4} {:>9.1} {:>10.3}",
            r.size,
            r.msgs,
            r.gbps(),
            r.mpps(),
            r.cpu_util * 100.0,
            r.cpu_per_gb()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let mut s: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        let l = Lat::of(&mut s).unwrap();
        assert_eq!(
            (l.min, l.p50, l.p99, l.p999, l.max),
            (1.0, 500.0, 990.0, 999.0, 1000.0)
        );
        assert_eq!(l.avg, 500.5);
        assert_eq!(Lat::of(&mut []), None);
        let l = Lat::of(&mut [7000]).unwrap();
        assert_eq!((l.p50, l.p999), (7.0, 7.0));
    }

    #[test]
    fn report_arithmetic() {
        let me = Side {
            sent: 1000,
            rx: 0,
            secs: 0.5,
            cpu: 0.25,
            wall: 0.5,
            resent: 3,
            recovery: Recovery {
                nak: 1,
                probe: 2,
                wait_ns: [300_000, 0, 2_000_000, 0, 0, 0],
                timer_fires: 4,
                timer_late_ns: 40_000,
                ..Recovery::default()
            },
        };
        let peer = Side {
            sent: 0,
            rx: 1000,
            secs: 0.0,
            cpu: 0.75,
            wall: 0.5,
            resent: 4,
            recovery: Recovery {
                nak: 5,
                timeout: 1,
                wait_ns: [900_000, 0, 0, 0, 70_000_000, 0],
                ..Recovery::default()
            },
        };
        let r = Report::new(1_000_000, &me, &peer, None);
        assert_eq!(r.resent, 7);
        assert_eq!(
            (r.recovery.nak, r.recovery.probe, r.recovery.timeout),
            (6, 2, 1)
        );
        // Mean waits of both sides: (0.3 + 0.9) ms over 6 NAK retries, 1 ms per
        // probe, 70 ms for the timeout; the timers 10 us late.
        assert_eq!(
            r.recovery.mean_wait_us(),
            [200.0, 0.0, 1000.0, 0.0, 70_000.0, 0.0]
        );
        assert_eq!(r.recovery.timer_late_us(), 10.0);
        assert_eq!(
            r.recovery.to_string(),
            "nak=6 (wait 200 us) reorder=0 probe=2 (wait 1000 us) probe_resend=0 \
             timeout=1 (wait 70000 us) selective=0; timers 4, late 10 us"
        );
        assert_eq!(r.recovery.since(me.recovery), peer.recovery);
        assert_eq!(r.bytes, 1_000_000_000);
        assert_eq!(r.gbps(), 16.0);
        assert_eq!(r.mpps(), 0.002);
        assert_eq!(r.cpu_per_gb(), 1.0);
        assert_eq!(r.cpu_util, 0.5);
        assert_eq!(Side::from_msg(&me.msg()).unwrap(), me);
        // An older peer's report has no `resent`.
        let old = Msg::new("stats")
            .with("sent", 1)
            .with("rx", 2)
            .with("secs", 0.5)
            .with("cpu", 0.25)
            .with("wall", 0.5);
        assert_eq!(Side::from_msg(&old).unwrap().resent, 0);
        assert!(!Side::from_msg(&old).unwrap().recovery.any());
        // A malformed wait list reads as no waits.
        let bad = old.clone().with("rec_nak", 2).with("rec_wait_ns", "1,2,x");
        let rec = Side::from_msg(&bad).unwrap().recovery;
        assert_eq!((rec.nak, rec.wait_ns), (2, [0; 6]));
    }

    /// A write bandwidth test's options, for tests to adjust.
    pub(crate) fn opts() -> Opts {
        Opts {
            op: Op::Write,
            kind: Kind::Bw,
            server: None,
            port: 0,
            dev: None,
            size: 65536,
            size_given: false,
            all: false,
            iters: 10,
            duration: None,
            depth: 128,
            post_list: 1,
            cq_mod: None,
            bidir: false,
            inline_size: 256,
            mtu: 1024,
            gid_idx: None,
            spin: Duration::ZERO,
            cmp_swap: false,
            qps: 1,
            transport: rverbs::QpType::Rc,
            perftest: false,
            rdma_cm: false,
            ack_timeout: 14,
            retry_count: 7,
            json: false,
        }
    }

    #[test]
    fn mismatched_tests_are_refused() {
        let o = opts();
        let a = hello(&o);
        assert!(check_hello(&a, &a).is_ok());
        let b = hello(&Opts {
            op: Op::Read,
            ..o.clone()
        });
        assert!(check_hello(&a, &b).unwrap_err().contains("op=read"));
        assert!(check_hello(&a, &Msg::new("hello")).is_err());
        assert_eq!(
            sizes(&Opts {
                all: true,
                ..o.clone()
            })
            .len(),
            23
        );
        // Latency moderation: every send by default (perftest's latency tools), -Q
        // capped at -t as perftest caps it.
        assert_eq!(o.lat_cq_mod(), 1);
        let q = |cq_mod, depth| {
            Opts {
                cq_mod,
                depth,
                ..o.clone()
            }
            .lat_cq_mod()
        };
        assert_eq!(q(Some(DEF_CQ_MOD), 128), 100);
        assert_eq!(q(Some(500), 16), 16);
        assert_eq!(q(Some(7), 0), 1);
        assert_eq!(
            sizes(&Opts {
                op: Op::Atomic,
                ..o
            }),
            vec![8]
        );
    }
}
