//! The control side of the two-process runs (`tests/xproc.rs`, `benches/qp_scale.rs`):
//! a line-oriented TCP connection, and the line each process sends to describe its QPs
//! (GID, region address and rkey, QP numbers).
#![allow(dead_code)]

use rverbs::*;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

pub type Res<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Line-oriented control connection.
pub struct Ctl {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Ctl {
    pub fn new(s: TcpStream) -> Res<Ctl> {
        // Request/response lines: no Nagle delay.
        s.set_nodelay(true)?;
        Ok(Ctl {
            r: BufReader::new(s.try_clone()?),
            w: s,
        })
    }

    pub fn send(&mut self, l: &str) -> Res {
        self.w.write_all(format!("{l}\n").as_bytes())?;
        Ok(self.w.flush()?)
    }

    pub fn recv(&mut self) -> Res<String> {
        let mut l = String::new();
        if self.r.read_line(&mut l)? == 0 {
            return Err("control connection closed".into());
        }
        Ok(l.trim_end().to_string())
    }

    /// Sends a command and returns the reply line (an error reply is an error).
    pub fn cmd(&mut self, l: &str) -> Res<String> {
        self.send(l)?;
        let r = self.recv()?;
        if let Some(e) = r.strip_prefix("ERR ") {
            return Err(format!("passive side, `{l}`: {e}").into());
        }
        Ok(r)
    }
}

/// What the other process said about its QPs.
pub struct PeerLine {
    pub gid: Gid,
    pub addr: u64,
    pub rkey: u32,
    pub qpns: Vec<u32>,
}

/// The line describing this process's QPs: GID 1 of `ctx`, `mr`'s address and rkey,
/// and the QP numbers.
pub fn info_line(ctx: &Context, mr: &Mr, qps: &[Qp]) -> String {
    let qpns: Vec<String> = qps.iter().map(|q| q.qp_num().to_string()).collect();
    format!(
        "{} {} {} {}",
        ctx.gid(1).unwrap().hex(),
        mr.addr(),
        mr.rkey(),
        qpns.join(",")
    )
}

/// Reads an [`info_line`].
pub fn parse_info(l: &str) -> Res<PeerLine> {
    let f: Vec<&str> = l.split_whitespace().collect();
    if f.len() != 4 {
        return Err(format!("bad info line {l:?}").into());
    }
    Ok(PeerLine {
        gid: Gid::from_hex(f[0]).map_err(|e| format!("gid {:?}: {e}", f[0]))?,
        addr: f[1].parse()?,
        rkey: f[2].parse()?,
        qpns: f[3]
            .split(',')
            .map(str::parse)
            .collect::<std::result::Result<_, _>>()?,
    })
}

/// Connects each of `qps` to the peer's QP of the same index (first PSNs 0).
pub fn connect_all(qps: &[Qp], p: &PeerLine, o: &ConnectOpts) -> Res {
    for (q, &qpn) in qps.iter().zip(&p.qpns) {
        q.connect(
            &PeerInfo {
                qpn,
                psn: 0,
                gid: p.gid,
            },
            o,
        )?;
    }
    Ok(())
}
