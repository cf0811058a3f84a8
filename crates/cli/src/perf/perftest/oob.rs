//! The channel perftest exchanges its parameters over: its TCP socket
//! (`ctx_xchg_data_ethernet`, the keys as text), or with `-R` a SEND/receive pair on
//! an RDMA CM connection ([`super::rdma_cm`], the keys as binary). Every step is
//! symmetric: the client writes first and then reads the same number of bytes, the
//! server reads first.

use super::rdma_cm::{self, CmLink};
use super::{decode, encode, peer_timeout, BwReport, Dest, Opts};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// TCP keepalive on the exchange socket: a peer host that vanishes while we wait
/// (untimed) for the end of its run is noticed after about 2 minutes (60 s idle, then
/// 6 probes 10 s apart).
fn keepalive(s: &TcpStream) {
    let k = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(60))
        .with_interval(Duration::from_secs(10))
        .with_retries(6);
    let _ = socket2::SockRef::from(s).set_tcp_keepalive(&k);
}

/// perftest's TCP connection: the client retries for a few seconds while the server
/// starts.
fn open_tcp(o: &Opts) -> Result<(TcpStream, SocketAddr), String> {
    match &o.server {
        Some(server) => {
            let addrs: Vec<SocketAddr> = (server.as_str(), o.port)
                .to_socket_addrs()
                .map_err(|e| format!("{server}: {e}"))?
                .collect();
            // The perftest server may still be starting: retry for a few seconds.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                for a in &addrs {
                    if let Ok(s) = TcpStream::connect_timeout(a, Duration::from_secs(2)) {
                        return Ok((s, *a));
                    }
                }
                if Instant::now() > deadline {
                    return Err(format!("couldn't connect to {server}:{}", o.port));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        None => {
            // perftest's client connects over IPv4 (6.06) or either family (newer).
            let l = TcpListener::bind(("::", o.port))
                .or_else(|_| TcpListener::bind(("0.0.0.0", o.port)))
                .map_err(|e| format!("couldn't listen on port {}: {e}", o.port))?;
            l.accept().map_err(|e| format!("accept: {e}"))
        }
    }
}

/// The exchange channel and our role in it.
pub(super) struct Oob {
    pub(super) link: Link,
    pub(super) client: bool,
}

/// What carries the exchange.
pub(super) enum Link {
    /// perftest's TCP socket.
    Tcp(TcpStream),
    /// `-R`: the control connection of the RDMA CM.
    Cm(Box<CmLink>),
}

impl Oob {
    /// The TCP exchange: connect or accept (with keepalive and the handshake
    /// timeout); returns the peer's address too.
    pub(super) fn tcp(o: &Opts) -> Result<(Oob, SocketAddr), String> {
        let (s, peer) = open_tcp(o)?;
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(peer_timeout()));
        keepalive(&s);
        let oob = Oob {
            link: Link::Tcp(s),
            client: o.server.is_some(),
        };
        Ok((oob, peer))
    }

    /// The `-R` exchange over `link`, with the handshake timeout.
    pub(super) fn cm(mut link: CmLink, client: bool) -> Oob {
        link.wait = Some(peer_timeout());
        Oob {
            link: Link::Cm(Box::new(link)),
            client,
        }
    }

    pub(super) fn xchg(&mut self, mine: &[u8]) -> Result<Vec<u8>, String> {
        let s = match &mut self.link {
            Link::Tcp(s) => s,
            Link::Cm(c) => return c.xchg(mine),
        };
        let err = |e: std::io::Error| format!("perftest exchange: {e}");
        let mut theirs = vec![0u8; mine.len()];
        if self.client {
            s.write_all(mine).map_err(err)?;
            s.read_exact(&mut theirs).map_err(err)?;
        } else {
            s.read_exact(&mut theirs).map_err(err)?;
            s.write_all(mine).map_err(err)?;
        }
        Ok(theirs)
    }

    /// `ctx_hand_shake`: our keys out, the peer's in (text over TCP, binary over the
    /// CM).
    pub(super) fn hand_shake(&mut self, me: &Dest) -> Result<Dest, String> {
        match self.link {
            Link::Tcp(_) => decode(&self.xchg(&encode(me))?),
            Link::Cm(_) => rdma_cm::decode(&self.xchg(&rdma_cm::encode(me))?),
        }
    }

    /// How long a read may wait for the peer (`None`: as long as it takes).
    pub(super) fn set_wait(&mut self, t: Option<Duration>) {
        match &mut self.link {
            Link::Tcp(s) => {
                let _ = s.set_read_timeout(t);
            }
            Link::Cm(c) => c.wait = t,
        }
    }

    /// Runs `f`, an exchange that waits for the peer's end of a run (which lasts as
    /// long as the run does), with no read timeout; handshake steps after it have
    /// theirs again. TCP keepalive, or the CM's disconnect, ends the wait if the peer
    /// goes.
    pub(super) fn after_run<T>(
        &mut self,
        f: impl FnOnce(&mut Oob) -> Result<T, String>,
    ) -> Result<T, String> {
        self.set_wait(None);
        let r = f(self);
        self.set_wait(Some(peer_timeout()));
        r
    }

    /// `xchg_bw_reports`: ours out, theirs in, as the five raw fields: a half-duplex
    /// perftest server sends a report it never filled in (whatever its stack held),
    /// so only a side that uses the peer's figures reads them ([`BwReport::from_fields`]).
    pub(super) fn reports(&mut self, mine: &BwReport) -> Result<[[u8; 8]; 5], String> {
        let mut theirs = [[0u8; 8]; 5];
        for (t, m) in theirs.iter_mut().zip(mine.fields()) {
            t.copy_from_slice(&self.xchg(&m)?);
        }
        Ok(theirs)
    }

    /// `ctx_close_connection`: a handshake, then over TCP `"done"` with its NUL (which
    /// nobody reads).
    pub(super) fn close(&mut self, me: &Dest) -> Result<(), String> {
        self.hand_shake(me)?;
        if let Link::Tcp(s) = &mut self.link {
            let _ = s.write_all(b"done\0");
        }
        Ok(())
    }

    /// `-R`: ends the control connection.
    pub(super) fn close_cm(&self) {
        if let Link::Cm(c) = &self.link {
            c.close();
        }
    }

    /// Waits (bounded) until the peer closes the TCP connection: `ib_write_lat` ends
    /// with no closing exchange, and our QP must answer its last packets until it
    /// exits. (Over the CM, closing the test's connections waits for the peer.)
    pub(super) fn linger(&mut self) {
        if let Link::Tcp(s) = &mut self.link {
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let mut b = [0u8; 64];
            while matches!(s.read(&mut b), Ok(n) if n > 0) {}
        }
    }
}
