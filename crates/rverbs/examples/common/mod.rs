//! What the examples share: command-line handling and the out-of-band exchange over
//! TCP that every RDMA program needs before its first packet (QP number, first PSN,
//! GID, and for one-sided operations a region's address, key and length).
#![allow(dead_code)]

use rverbs::{ConnectOpts, Context, PeerInfo, Qp, RemoteBuf};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};

/// Which side this process is, from the command line:
/// `server [PORT] [-d DEVICE]` or `client HOST PORT [-d DEVICE]`.
pub enum Role {
    /// Waits for the client on a TCP port.
    Server(TcpListener),
    /// Connects to the server.
    Client(TcpStream),
}

/// Parses the command line, opens the device and makes the TCP connection's first
/// half. The server prints `listening on PORT` (port 0 picks a free one).
pub fn start(example: &str) -> Result<(Role, Context), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || {
        format!(
            "usage: {example} server [PORT] [-d DEVICE] | {example} client HOST PORT [-d DEVICE]"
        )
    };
    let mut pos = Vec::new();
    let mut dev = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "-d" {
            dev = Some(it.next().ok_or_else(usage)?.clone());
        } else {
            pos.push(a.as_str());
        }
    }
    let ctx = rverbs::device(dev.as_deref())?.open()?;
    let role = match pos.as_slice() {
        ["server"] | ["server", _] => {
            let port: u16 = pos.get(1).map_or(Ok(18516), |p| p.parse())?;
            let l = TcpListener::bind(("0.0.0.0", port))?;
            println!("listening on {}", l.local_addr()?.port());
            std::io::stdout().flush()?;
            Role::Server(l)
        }
        ["client", host, port] => Role::Client(TcpStream::connect((*host, port.parse::<u16>()?))?),
        _ => return Err(usage().into()),
    };
    Ok((role, ctx))
}

/// What one side tells the other: its QP, first PSN and GID, and a region of its own.
#[derive(Debug, Clone, Copy)]
pub struct Info {
    /// QP number, first PSN and GID.
    pub peer: PeerInfo,
    /// A region the peer may use (address 0 / key 0 / length 0 when none).
    pub buf: RemoteBuf,
}

/// No region to offer (address 0, key 0, length 0).
pub const NO_BUF: RemoteBuf = RemoteBuf {
    addr: 0,
    rkey: 0,
    len: 0,
};

impl Info {
    /// What an RC QP tells its peer: its number, the first PSN of `opts` and the GID at
    /// `opts`' GID index, and `buf` if it offers a region.
    pub fn rc(
        qp: &Qp,
        opts: &ConnectOpts,
        buf: Option<RemoteBuf>,
    ) -> Result<Info, Box<dyn std::error::Error>> {
        Ok(Info {
            peer: PeerInfo {
                qpn: qp.qp_num(),
                psn: opts.psn,
                gid: qp.context().gid(opts.sgid_index).ok_or("no GID")?,
            },
            buf: buf.unwrap_or(NO_BUF),
        })
    }
}

/// The TCP connection to the other side, after the handshake.
pub struct Oob {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Oob {
    /// Accepts (server) or uses (client) the connection, sends `mine`, returns theirs.
    pub fn exchange(role: Role, mine: &Info) -> Result<(Oob, Info), Box<dyn std::error::Error>> {
        let s = match role {
            Role::Server(l) => l.accept()?.0,
            Role::Client(s) => s,
        };
        let mut oob = Oob {
            r: BufReader::new(s.try_clone()?),
            w: s,
        };
        // Two lines in rverbs' text forms (`PeerInfo` and `RemoteBuf`'s Display):
        // "qpn=0x00abcd psn=0x000000 gid=::ffff:127.0.0.7", "addr=0x... rkey=0x... len=N".
        oob.send(&format!("{}\n{}", mine.peer, mine.buf))?;
        let peer = oob.recv()?;
        let buf = oob.recv()?;
        let theirs = Info {
            peer: peer.parse()?,
            buf: buf.parse()?,
        };
        Ok((oob, theirs))
    }

    /// Sends one line.
    pub fn send(&mut self, line: &str) -> std::io::Result<()> {
        writeln!(self.w, "{line}")?;
        self.w.flush()
    }

    /// Receives one line (an error if the peer closed the connection).
    pub fn recv(&mut self) -> std::io::Result<String> {
        let mut line = String::new();
        if self.r.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the peer closed the connection",
            ));
        }
        Ok(line.trim_end().to_string())
    }
}

/// Waits for one completion (60 s at most: a server waits while its peer moves and
/// checks megabytes, which takes seconds on an emulated NIC) and checks it succeeded.
pub fn wait_ok(cq: &rverbs::Cq) -> Result<rverbs::Wc, Box<dyn std::error::Error>> {
    let mut wc = [rverbs::Wc::default()];
    if cq.poll_wait(&mut wc, std::time::Duration::from_secs(60))? == 0 {
        return Err("no completion within 60 s".into());
    }
    if wc[0].status != rverbs::WcStatus::Success {
        return Err(format!("work request {} failed: {:?}", wc[0].wr_id, wc[0].status).into());
    }
    Ok(wc[0])
}

/// Byte `i` of the pattern the examples send (a simple function of the index and a seed).
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed)
        .collect()
}
