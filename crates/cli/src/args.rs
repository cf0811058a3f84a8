//! The `rverbs` tool's command line: its commands, their flags and the parsers of
//! their values (clap).

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "rverbs",
    version,
    about = "RDMA verbs tools for the rverbs stack"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Runs CMD with rverbs' libibverbs.so.1 and librdmacm.so.1 first on its library
    /// path, so an unmodified C verbs or RDMA CM program (ibv_devinfo, ib_write_bw, rping,
    /// ib_send_bw -R, ...) uses the soft device. The library
    /// is RVERBS_LIBIBVERBS (its directory or the file), else the one next to this
    /// executable (`cargo build --release -p rverbs-libibverbs`).
    Exec {
        /// The program and its arguments (after `--`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        cmd: Vec<std::ffi::OsString>,
    },
    /// Two endpoints on the loopback soft device exchange RC SEND/RECV, RDMA WRITE,
    /// RDMA READ and atomics over real RoCE v2 packets, verify every byte, and report
    /// the speed.
    Demo {
        /// Iterations of each operation (at least 1).
        #[arg(short = 'n', long, default_value_t = 1000, value_parser = iters_parser)]
        iters: usize,
        /// Message size in bytes (1 B to 64 MiB).
        #[arg(short = 's', long, default_value_t = 65536, value_parser = demo_size_parser)]
        size: usize,
    },
    /// Ping-pong SENDs with a peer, compatible with rdma-core's ibv_rc_pingpong,
    /// ibv_uc_pingpong and ibv_ud_pingpong (options, TCP exchange on port 18515,
    /// closing lines). Without SERVER, waits for a client.
    Pingpong {
        /// rc, uc or ud.
        #[arg(value_parser = ["rc", "uc", "ud"])]
        transport: String,
        /// Server to connect to (omit to be the server).
        server: Option<String>,
        /// Listen on / connect to this TCP port.
        #[arg(short = 'p', long, default_value_t = 18515)]
        port: u16,
        /// Use this device (default: the loopback soft device).
        #[arg(short = 'd', long = "ib-dev")]
        dev: Option<String>,
        /// Port of the device (only 1 exists).
        #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
        ib_port: u8,
        /// Message size (default 4096; 1024 for ud, as ibv_ud_pingpong since rdma-core v26;
        /// 1 B to 1 GiB).
        #[arg(short = 's', long, value_parser = size_parser)]
        size: Option<usize>,
        /// Path MTU (rc, uc): 256, 512, 1024, 2048 or 4096.
        #[arg(short = 'm', long, default_value_t = 1024, value_parser = mtu_parser)]
        mtu: usize,
        /// Receives to keep posted.
        #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
        rx_depth: usize,
        /// Exchanges (at least 1).
        #[arg(short = 'n', long, default_value_t = 1000, value_parser = iters_parser)]
        iters: usize,
        /// Service level (ignored on RoCE).
        #[arg(short = 'l', long, default_value_t = 0)]
        sl: u8,
        /// Sleep on CQ events instead of polling.
        #[arg(short = 'e', long)]
        events: bool,
        /// Local GID index (default: one of the peer's address family).
        #[arg(short = 'g', long = "gid-idx")]
        gid_idx: Option<u8>,
        /// Validate every received buffer.
        #[arg(short = 'c', long = "chk")]
        check: bool,
        /// Print the port's counters (drops by reason, retransmissions) to stderr.
        #[arg(long)]
        stats: bool,
        /// ud server: answer each datagram through an address handle built from its
        /// work completion (create_ah_from_wc), using nothing the client announced but
        /// its address family; prints the first such AH.
        #[arg(long)]
        reply_from_wc: bool,
        /// Hop limit / TTL of this side's AH or path (rdma-core's pingpongs use 1).
        #[arg(long, default_value_t = 1)]
        hop_limit: u8,
        /// Traffic class / TOS of this side's AH or path.
        #[arg(long, default_value_t = 0)]
        tclass: u8,
        /// Local ACK timeout exponent: retransmit after 4.096 µs · 2^N without an ACK
        /// (rdma-core's tools use 14 = 67 ms; 7 retries follow).
        #[arg(long = "ack-timeout", default_value_t = 14, value_parser = clap::value_parser!(u8).range(1..=31))]
        ack_timeout: u8,
        /// Keep the device open this many seconds after the run, so its counters can
        /// be read over the wire (`rverbs perfquery --gid`).
        #[arg(long, default_value_t = 0.0)]
        linger: f64,
    },
    /// Ping over RDMA with connections made by the RDMA CM, wire-compatible with
    /// rdma-core's rping (RDMA READ of the client's buffer, RDMA WRITE back, per
    /// ping). -s: server; -c -a ADDR: client.
    Rping {
        /// Server: listen (on -a, or every address of the device).
        #[arg(short = 's', conflicts_with = "client")]
        server: bool,
        /// Client: connect to -a.
        #[arg(short = 'c')]
        client: bool,
        /// Address: the server's (client), the one to listen on (server).
        #[arg(short = 'a')]
        addr: Option<String>,
        /// Client: the source address to bind.
        #[arg(short = 'I')]
        source: Option<String>,
        /// Port.
        #[arg(short = 'p', default_value_t = rverbs_cli::rping::DEFAULT_PORT)]
        port: u16,
        /// Pings (0: until the peer goes).
        #[arg(short = 'C', default_value_t = 0)]
        count: u64,
        /// Ping data size (26 to 65535).
        #[arg(short = 'S', default_value_t = 64)]
        size: usize,
        /// Print the ping data.
        #[arg(short = 'v')]
        verbose: bool,
        /// Check the ping data (client).
        #[arg(short = 'V')]
        validate: bool,
        /// Debug output on stderr.
        #[arg(short = 'd')]
        debug: bool,
        /// Use this device (default: the one with the address; the loopback device).
        #[arg(long = "dev")]
        dev: Option<String>,
        /// Give up waiting for the peer after this many seconds.
        #[arg(long, default_value_t = 30.0)]
        timeout: f64,
        /// Print the port's and the CM's counters at the end (stderr).
        #[arg(long)]
        stats: bool,
    },
    /// RC connections made by the RDMA CM with SENDs both ways, wire-compatible with
    /// rdma-core's ucmatose. Without -s: the server.
    Ucmatose {
        /// Client: the server's address.
        #[arg(short = 's')]
        server: Option<String>,
        /// The address to bind.
        #[arg(short = 'b')]
        bind: Option<String>,
        /// Connections.
        #[arg(short = 'c', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
        connections: u32,
        /// Messages each way per connection.
        #[arg(short = 'C', default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=100000))]
        count: u32,
        /// Message size.
        #[arg(short = 'S', default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1048576))]
        size: u32,
        /// Port.
        #[arg(short = 'p', default_value_t = 7471)]
        port: u16,
        /// Use this device (default: the one with the address; the loopback device).
        #[arg(long = "dev")]
        dev: Option<String>,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 30.0)]
        timeout: f64,
    },
    /// UD datagrams to a peer found with the RDMA CM (SIDR), wire-compatible with
    /// rdma-core's udaddy. Without -s: the server.
    Udaddy {
        /// Client: the server's address.
        #[arg(short = 's')]
        server: Option<String>,
        /// The address to bind.
        #[arg(short = 'b')]
        bind: Option<String>,
        /// Connections.
        #[arg(short = 'c', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
        connections: u32,
        /// Messages each way per connection.
        #[arg(short = 'C', default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=100000))]
        count: u32,
        /// Message size (at most the path MTU).
        #[arg(short = 'S', default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=4096))]
        size: u32,
        /// Port (udaddy's is 7174).
        #[arg(long, default_value_t = 7174)]
        port: u16,
        /// Use this device (default: the one with the address; the loopback device).
        #[arg(long = "dev")]
        dev: Option<String>,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 30.0)]
        timeout: f64,
    },
    /// Read (or reset) a port's performance counters through its PMA, like
    /// infiniband-diags' perfquery: the local port, or a remote one over GSI (QP1).
    Perfquery {
        /// Use this device (default: the loopback soft device).
        #[arg(short = 'd', long = "Ca")]
        dev: Option<String>,
        /// Port (PortSelect).
        #[arg(short = 'P', long = "Port", default_value_t = 1)]
        port: u8,
        /// PortCountersExtended (64-bit counters).
        #[arg(short = 'x', long = "extended")]
        extended: bool,
        /// Reset the counters only.
        #[arg(short = 'R', long = "Reset_only")]
        reset_only: bool,
        /// Read, then reset the counters.
        #[arg(short = 'r', long = "reset_after_read")]
        reset_after: bool,
        /// Query the port with this GID (an IPv4 or IPv6 address) over GSI.
        #[arg(long)]
        gid: Option<String>,
    },
    /// Query the local port's SMA with a directed-route SMP (RoCE has no QP0, so only
    /// the local port), like infiniband-diags' smpquery.
    Smpquery {
        /// nodeinfo, nodedesc, portinfo, guids or pkeys.
        #[arg(value_parser = ["nodeinfo", "nodedesc", "portinfo", "guids", "pkeys"])]
        what: String,
        /// Use this device (default: the loopback soft device).
        #[arg(short = 'd', long = "Ca")]
        dev: Option<String>,
        /// Port.
        #[arg(short = 'P', long = "Port", default_value_t = 1)]
        port: u8,
        /// M_Key to put in the SMP (decimal or 0x-hex).
        #[arg(long, default_value = "0")]
        mkey: String,
    },
    /// Management datagram tools.
    Mad {
        #[command(subcommand)]
        command: MadCommand,
    },
    /// The soft devices and their port, in ibv_devinfo's layout (or JSON).
    Devinfo {
        /// Only this device.
        #[arg(short = 'd', long = "ib-dev")]
        dev: Option<String>,
        /// Only this port (a port the device lacks prints none, as ibv_devinfo).
        #[arg(short = 'i', long = "ib-port", value_parser = clap::value_parser!(u8).range(1..))]
        ib_port: Option<u8>,
        /// Print only the devices' names.
        #[arg(short = 'l', long)]
        list: bool,
        /// Every attribute, the capability flags and the GID table.
        #[arg(short = 'v', long)]
        verbose: bool,
        /// Print JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// perftest-like benchmarks between two processes: `rverbs perf write bw` on one
    /// side, `rverbs perf write bw HOST` on the other. `tcp` runs the same
    /// measurements over a plain TCP socket (the baseline).
    Perf {
        /// send, write, read, atomic, or tcp.
        #[arg(value_parser = ["send", "write", "read", "atomic", "tcp"])]
        op: String,
        /// bw (bandwidth, message rate) or lat (latency percentiles).
        #[arg(value_parser = ["bw", "lat"])]
        kind: String,
        /// Server to connect to (omit to be the server).
        server: Option<String>,
        /// Control connection TCP port.
        #[arg(short = 'p', long, default_value_t = 18515)]
        port: u16,
        /// Device (default: the loopback soft device).
        #[arg(short = 'd', long = "ib-dev")]
        dev: Option<String>,
        /// Message size in bytes (default 65536 for bw, 2 for lat; 1 B to 1 GiB).
        #[arg(short = 's', long, value_parser = size_parser)]
        size: Option<usize>,
        /// Run every size from 2 bytes to 8 MiB.
        #[arg(short = 'a', long)]
        all: bool,
        /// Messages per size (default 5000 for bw, 1000 for lat; at least 1).
        #[arg(short = 'n', long, value_parser = clap::value_parser!(u64).range(1..))]
        iters: Option<u64>,
        /// Run each size for this many seconds instead of -n.
        #[arg(short = 'D', long)]
        duration: Option<f64>,
        /// Outstanding messages (bw).
        #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
        depth: usize,
        /// Requests posted per ibv_post_send call (bw).
        #[arg(short = 'l', long = "post-list", default_value_t = 1)]
        post_list: usize,
        /// Completion moderation, as perftest's -Q: signal one send in N and the last,
        /// capped at -t as perftest does (default: SEND/WRITE latency 1, every send, as
        /// perftest's latency tools at their TX depth of 1; bw: a quarter of -t, at
        /// most 16; rounded to a multiple of -l). READ and atomic latency signal every
        /// request. SEND latency awaits each signaled SEND's completion before the
        /// answer, as ib_send_lat.
        #[arg(short = 'Q', long = "cq-mod", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        cq_mod: Option<u64>,
        /// Both sides send (bw).
        #[arg(short = 'b', long)]
        bidirectional: bool,
        /// SEND and WRITE messages of at most this many bytes go INLINE, as perftest's
        /// -I (0: none; perftest sends none on a device it does not know, this one
        /// included).
        #[arg(short = 'I', long = "inline-size", default_value_t = 256, value_parser = clap::value_parser!(u32).range(0..=512))]
        inline_size: u32,
        /// Path MTU: 256, 512, 1024, 2048 or 4096 (default: the port's active MTU, as
        /// perftest).
        #[arg(short = 'm', long, default_value_t = 0, value_parser = mtu_or_0_parser)]
        mtu: usize,
        /// GID index (default: one of the peer's address family).
        #[arg(short = 'x', long = "gid-index")]
        gid_idx: Option<u8>,
        /// Microseconds a waiting thread busy-polls before it sleeps until the next
        /// datagram (0: sleep at once, best when busy threads outnumber cores). `tcp`
        /// applies the same policy to its socket reads.
        #[arg(long = "spin-us", default_value_t = 0)]
        spin_us: u64,
        /// The atomic operation (atomic tests), as perftest's -A: FETCH_AND_ADD (add 1)
        /// or CMP_AND_SWAP (compare 0, swap 0, perftest's values).
        #[arg(short = 'A', long = "atomic_type", value_parser = ["FETCH_AND_ADD", "CMP_AND_SWAP"], default_value = "FETCH_AND_ADD")]
        atomic_type: String,
        /// QPs, as perftest's -q (with --perftest, bandwidth tools): each sends -n
        /// messages with -t outstanding.
        #[arg(short = 'q', long = "qp", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=16384))]
        qps: u64,
        /// The transport, as perftest's -c: RC, or with --perftest UC (SEND and WRITE
        /// tools) or UD (SEND tools; messages of at most one MTU, as perftest).
        #[arg(short = 'c', long = "connection", value_parser = ["RC", "UC", "UD"], default_value = "RC")]
        connection: String,
        /// Speak perftest's own exchange (TCP, RoCE GIDs), so an unmodified perftest
        /// tool is the peer, in either role: write/send/read/atomic bw = ib_write_bw,
        /// ib_send_bw, ib_read_bw, ib_atomic_bw; lat = ib_write_lat, ib_send_lat,
        /// ib_read_lat, ib_atomic_lat. Any perftest from 5.70 on: we announce 6.06, so
        /// perftest 6.28+ skips its parameter negotiation. Spoken: RC, one QP, the
        /// default options plus -s, -n (default: perftest's), -a, -t, -l and -Q (bw
        /// tools), -b (bw tools), -D (ib_write_bw, ib_read_bw, ib_atomic_bw), -m, -x,
        /// -p, -A, -c UC/UD, -q (bw tools), -R. Start both sides with the same
        /// -s/-n/-a/-l/-D/-b, as perftest needs.
        #[arg(long)]
        perftest: bool,
        /// Connect through the RDMA CM instead of a TCP socket, as perftest's -R
        /// (implies --perftest): the exchange runs over a CM-connected RC QP, the
        /// test's QPs are connected by the CM on the same port (-p), to the peer's
        /// IPv4 address; the path MTU and ACK timeout are then the CM's. RC only.
        #[arg(short = 'R', long = "rdma-cm")]
        rdma_cm: bool,
        /// Local ACK timeout exponent of the RC QPs (4.096 µs · 2^n), as perftest's -u.
        #[arg(long = "ack-timeout", default_value_t = 14, value_parser = clap::value_parser!(u8).range(1..=31))]
        ack_timeout: u8,
        /// RC retry count (retries after a local ACK timeout or a sequence NAK before
        /// the request fails with RETRY_EXC_ERR), 0 to 7.
        #[arg(long = "retry-count", default_value_t = 7, value_parser = clap::value_parser!(u8).range(0..=7))]
        retry_count: u8,
        /// One JSON object per size instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Print every device's GID table in show_gids layout (`DEV PORT INDEX GID IPv4
    /// VER DEV`, then `n_gids_found=N`): the soft devices' tables (as the kernel would
    /// build them for rxe on the same interfaces), or a kernel's sysfs with --sysfs.
    Gids {
        /// Read a kernel's GID tables from sysfs: /sys/class/infiniband, or ROOT (a
        /// directory laid out like it).
        #[arg(long, value_name = "ROOT", num_args = 0..=1, default_missing_value = "/sys/class/infiniband")]
        sysfs: Option<std::path::PathBuf>,
        /// Print a JSON array instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The rverbs side of the interop test of RDMA WRITE/READ, SEND and WRITE with
    /// immediate and atomics against interop/rdma_ops.c (libibverbs) on kernel rxe.
    /// Without SERVER: the responder.
    #[command(name = "interop-peer", hide = true)]
    InteropPeer {
        /// Responder to connect to (omit to be the responder).
        server: Option<String>,
        /// Listen on / connect to this TCP port.
        #[arg(short = 'p', long, default_value_t = 18700)]
        port: u16,
        /// Use this device (default: the loopback soft device).
        #[arg(short = 'd', long = "ib-dev")]
        dev: Option<String>,
        /// Local GID index (default: one of the peer's address family).
        #[arg(short = 'g', long = "gid-idx")]
        gid_idx: Option<u8>,
        /// Schedule repetitions (1..=64).
        #[arg(short = 'n', long, default_value_t = 4)]
        iters: usize,
        /// Print the port's counters to stderr at the end.
        #[arg(long)]
        stats: bool,
        /// Local ACK timeout exponent: retransmit after 4.096 µs · 2^N without an ACK
        /// (rdma-core's tools use 14 = 67 ms; 7 retries follow).
        #[arg(long = "ack-timeout", default_value_t = 14, value_parser = clap::value_parser!(u8).range(1..=31))]
        ack_timeout: u8,
    },
    /// Work with packet captures.
    Pcap {
        #[command(subcommand)]
        command: PcapCommand,
    },
    /// Flow steering rules (ibv_create_flow).
    Flow {
        #[command(subcommand)]
        command: FlowCommand,
    },
}

#[derive(Subcommand)]
pub(crate) enum FlowCommand {
    /// Check a rule as ibv_create_flow would (kernel and mlx5 checks) and print it with
    /// the kernel's uverbs bytes; on failure print the errno and exit with it. Rule
    /// syntax: `[normal|all-default|mc-default|sniffer] [prio N] [dont-trap] [egress]
    /// [[inner] eth|ipv4|ipv6|tcp|udp|vxlan|gre|mpls|esp FIELD VALUE[/MASK]...]
    /// [tag N] [drop] [count]`, e.g. `prio 1 ipv4 dst 10.0.0.0/24 udp dport 4791 tag 5`.
    Check {
        /// The rule (words may be given as separate arguments).
        #[arg(required = true, num_args = 1..)]
        rule: Vec<String>,
        /// QP type the flow attaches to: raw, ud or another (rc).
        #[arg(long, default_value = "raw", value_parser = ["raw", "ud", "rc"])]
        qp_type: String,
        /// Check as a caller without CAP_NET_RAW.
        #[arg(long)]
        no_cap_net_raw: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum MadCommand {
    /// Print traps as they arrive, decoded: BM and PMA Trap MADs sent to this port's
    /// GSI (make it a trap destination with `mad bm-set --trap-dest`), and traps the
    /// port raises itself. Prints `listening on gid <gid> qp 1` first.
    ListenTraps {
        /// Use this device (default: the loopback soft device).
        #[arg(short = 'd', long = "Ca")]
        dev: Option<String>,
        /// Exit after this many traps (non-zero status if the timeout comes first).
        #[arg(long)]
        count: Option<usize>,
        /// Give up after this many seconds.
        #[arg(long)]
        timeout: Option<f64>,
    },
    /// Keep a port up with the given B_Key / M_Key until stdin closes; its GSI answers
    /// PMA and BM MADs. Prints `serving gid <gid> qp 1` first.
    Serve {
        /// Use this device (default: the loopback soft device).
        #[arg(short = 'd', long = "Ca")]
        dev: Option<String>,
        /// B_Key (decimal or 0x-hex; 0 = no B_Key checking).
        #[arg(long, default_value = "0")]
        bkey: String,
        /// M_Key (protect bits 2 when non-zero).
        #[arg(long, default_value = "0")]
        mkey: String,
    },
    /// Send a BM Set carrying a B_Key to a remote port: a new B_Key (`--new-bkey`) or
    /// the trap destination of its ClassPortInfo (`--trap-dest`).
    BmSet {
        /// The remote port's GID.
        #[arg(long)]
        gid: String,
        /// The B_Key to put in the MAD.
        #[arg(long, default_value = "0")]
        bkey: String,
        /// Set BKeyInfo to this B_Key.
        #[arg(long, conflicts_with = "trap_dest")]
        new_bkey: Option<String>,
        /// Set the ClassPortInfo trap destination to this GID (QP 1, the GSI Q_Key).
        #[arg(long)]
        trap_dest: Option<String>,
        /// Use this device (default: the loopback soft device).
        #[arg(short = 'd', long = "Ca")]
        dev: Option<String>,
    },
}

#[derive(Subcommand)]
pub(crate) enum PcapCommand {
    /// Print one line per RoCE v2 (UDP port 4791) packet of a pcap or pcapng capture,
    /// then the totals.
    ///
    /// Line: `<index> <src-ip>:<port> > <dst-ip>:4791 <OPCODE> qpn=0x<hex> psn=<n>
    /// [ackreq] [se] [pad=<n>] [reth ...] [aeth ...] [deth ...] [imm=0x<hex>]
    /// [atomic ...] payload=<n> icrc=<ok|bad> [mad <class> <method> attr=0x<hex>
    /// mod=0x<hex> status=0x<hex> tid=0x<hex>]` (the MAD part for UD packets to or
    /// from QP1 carrying a 256-byte MAD); a record that cannot be decoded prints
    /// `<index> malformed: <reason>`. Totals: `packets` counts every record, `roce` the
    /// well-formed RoCE v2 packets (icrc_ok + icrc_bad), `malformed` the undecodable
    /// ones. Link types: Ethernet, raw IP, IPv4, IPv6, Linux cooked (v1, v2), BSD
    /// loopback. Exits non-zero when the file is not a capture, is cut short, or is
    /// corrupt (after printing what it could decode).
    Decode {
        /// The capture file.
        file: std::path::PathBuf,
    },
}

/// The largest `-s` of pingpong and perf: each side registers twice this (a send and
/// a receive half), and IBTA caps a message at 2^31 bytes.
pub(crate) const MAX_SIZE: usize = 1 << 30;
/// The largest `demo --size`: its two endpoints register twice this each.
const MAX_DEMO_SIZE: usize = 64 << 20;

/// A byte count: decimal, at least 1 and at most `max`.
fn bounded_size(s: &str, max: usize) -> Result<usize, String> {
    let n: u64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a size in bytes"))?;
    if n == 0 || n > max as u64 {
        return Err(format!("{n} is not in 1..={max} (bytes)"));
    }
    Ok(n as usize)
}

fn size_parser(s: &str) -> Result<usize, String> {
    bounded_size(s, MAX_SIZE)
}

fn demo_size_parser(s: &str) -> Result<usize, String> {
    bounded_size(s, MAX_DEMO_SIZE)
}

fn iters_parser(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("0 is not in 1.. (iterations)".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{s:?} is not a number of iterations")),
    }
}

/// An IBTA path MTU in bytes (the `enum ibv_mtu` values).
fn mtu_parser(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(m @ (256 | 512 | 1024 | 2048 | 4096)) => Ok(m),
        _ => Err(format!(
            "invalid MTU {s} (valid: 256, 512, 1024, 2048, 4096)"
        )),
    }
}

/// [`mtu_parser`], or 0 for the port's active MTU.
fn mtu_or_0_parser(s: &str) -> Result<usize, String> {
    if s == "0" {
        return Ok(0);
    }
    mtu_parser(s).map_err(|e| e.replace("(valid: ", "(valid: 0 (the port's), "))
}
