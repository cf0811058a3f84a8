//! The TCP baseline of `rverbs perf tcp {bw|lat}`: the same sizes, iterations or
//! duration, and process layout over one plain TCP connection (`TCP_NODELAY`), beside
//! the control connection. A stream has no queue depth or post list: the kernel's
//! socket buffers play that part.
//!
//! **Wait policy.** `--spin-us` applies here as on the RDMA side (`rverbs::Cq::wait`):
//! a reader that finds no data busy-polls the socket (`recv` with `MSG_DONTWAIT`, one
//! system call per try, as the RDMA side's `recvmmsg`) for that long before it sleeps
//! in a blocking `read`; 0 sleeps at once. So each RDMA wait policy has its TCP
//! counterpart (`bench/compare.sh` reports both).

use super::ctrl::{self, Msg};
use super::{Bench, Opts, PeerDone, Plan, Progress, Side, STALL};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The data connection.
pub struct Tcp {
    s: TcpStream,
    buf: Vec<u8>,
    spin: Duration,
}

/// Segments the connection has retransmitted (`TCP_INFO`'s `tcpi_total_retrans`);
/// 0 if the kernel will not say.
fn total_retrans(s: &TcpStream) -> u32 {
    rverbs_sys::misc::tcp_total_retrans(s)
}

/// One `recv(2)` with `MSG_DONTWAIT` on a blocking socket.
fn recv_nowait(s: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    rverbs_sys::misc::recv_nowait(s, buf)
}

/// Reads what is there: busy-polls for up to `spin`, then sleeps in a blocking
/// `read` (bounded by the socket's read timeout). A read that sleeps starts its spin
/// anew on the next call, as `rverbs::Cq::wait` does.
fn read_some(s: &mut TcpStream, buf: &mut [u8], spin: Duration) -> std::io::Result<usize> {
    if !spin.is_zero() && !buf.is_empty() {
        let start = Instant::now();
        loop {
            match recv_nowait(s, buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                r => return r,
            }
            if start.elapsed() >= spin {
                break;
            }
            std::hint::spin_loop();
        }
    }
    s.read(buf)
}

impl Tcp {
    /// The client connects a second connection to the server's port; the server
    /// accepts it on its listener.
    pub fn connect(
        o: &Opts,
        peer: Option<SocketAddr>,
        listener: Option<TcpListener>,
        max_size: usize,
    ) -> Result<Tcp, String> {
        let s = match (&o.server, listener) {
            (Some(_), _) => {
                let mut a = peer.ok_or("no server address")?;
                a.set_port(o.port);
                TcpStream::connect_timeout(&a, Duration::from_secs(10))
                    .map_err(|e| format!("data connection: {e}"))?
            }
            (None, Some(l)) => l.accept().map(|(s, _)| s).map_err(|e| e.to_string())?,
            (None, None) => return Err("no listener".into()),
        };
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        // Reads wake up now and then to see whether the peer said it is done.
        s.set_read_timeout(Some(Duration::from_millis(20)))
            .map_err(|e| e.to_string())?;
        Ok(Tcp {
            s,
            buf: vec![0x5a; max_size.max(1)],
            spin: o.spin,
        })
    }
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` if `stop()` said to give up first.
fn read_full(
    s: &mut TcpStream,
    buf: &mut [u8],
    spin: Duration,
    stop: &mut dyn FnMut() -> Result<bool, String>,
) -> Result<bool, String> {
    let mut got = 0;
    let mut last = Instant::now();
    while got < buf.len() {
        match read_some(s, &mut buf[got..], spin) {
            Ok(0) => return Err("the peer closed the data connection".into()),
            Ok(n) => {
                got += n;
                last = Instant::now();
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if got == 0 && stop()? {
                    return Ok(false);
                }
                if last.elapsed() > STALL {
                    return Err(format!("no data for {}s", STALL.as_secs()));
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(true)
}

impl Bench for Tcp {
    fn resent(&self) -> u64 {
        u64::from(total_retrans(&self.s))
    }

    fn bw(
        &mut self,
        plan: &Plan,
        peer: &PeerDone,
        ctrl_w: &mut TcpStream,
        p: &mut Progress,
    ) -> Result<Side, String> {
        let size = plan.size;
        let meter = super::Meter::start();
        let mut rs = self.s.try_clone().map_err(|e| e.to_string())?;
        let mut rbuf = vec![0u8; size.clamp(1, 1 << 20)];
        let sbuf = &self.buf[..size];
        let spin = self.spin;
        let ws = &mut self.s;
        let start = meter.start;
        let (sent, secs, rx) = std::thread::scope(|sc| -> Result<(u64, f64, u64), String> {
            // The receiver counts bytes until the peer's announced total arrived, and
            // when the last of them did (seconds since the start).
            let receiver = sc.spawn(move || -> Result<(u64, f64), String> {
                if !plan.receives {
                    return Ok((0, 0.0));
                }
                let mut bytes = 0u64;
                let mut last = Instant::now();
                let mut last_byte = 0.0;
                loop {
                    if let Some(n) = peer.get()? {
                        if bytes >= n * size as u64 {
                            return Ok((bytes / size as u64, last_byte));
                        }
                    }
                    match read_some(&mut rs, &mut rbuf, spin) {
                        Ok(0) => return Err("the peer closed the data connection".into()),
                        Ok(n) => {
                            bytes += n as u64;
                            last = Instant::now();
                            last_byte = (last - start).as_secs_f64();
                        }
                        Err(e)
                            if matches!(
                                e.kind(),
                                ErrorKind::WouldBlock
                                    | ErrorKind::TimedOut
                                    | ErrorKind::Interrupted
                            ) =>
                        {
                            if last.elapsed() > STALL {
                                return Err(format!("no data for {}s", STALL.as_secs()));
                            }
                        }
                        Err(e) => return Err(e.to_string()),
                    }
                }
            });
            let mut sent = 0u64;
            let mut secs = 0.0;
            if plan.sends {
                while !plan.stop(sent) {
                    ws.write_all(sbuf).map_err(|e| e.to_string())?;
                    sent += 1;
                    if plan.progress {
                        p.tick(sent, plan.iters);
                    }
                }
                // Bytes in the socket are not yet delivered: this is only when the
                // last write returned. The receiver's figure is when its last byte
                // arrived, and the report takes the later of the two sides' (the
                // sides' stats are exchanged after the run), so a transfer counts
                // until the receiver has everything, as an RDMA send counts until its
                // completion (the receiver's acknowledgement).
                secs = meter.secs();
            }
            ctrl::send(ctrl_w, &Msg::new("done").with("sent", sent))?;
            let (rx, rx_secs) = receiver.join().map_err(|_| "receiver thread panicked")??;
            Ok((sent, secs.max(rx_secs), rx))
        })?;
        Ok(meter.side(sent, rx, secs))
    }

    fn lat(
        &mut self,
        plan: &Plan,
        peer: &PeerDone,
        ctrl_w: &mut TcpStream,
        p: &mut Progress,
    ) -> Result<(Side, Vec<u64>), String> {
        let size = plan.size;
        let meter = super::Meter::start();
        let mut samples = Vec::with_capacity(plan.iters.unwrap_or(100_000) as usize);
        let mut rbuf = vec![0u8; size.max(1)];
        let mut iters = 0u64;
        if plan.sends {
            while !plan.stop(iters) {
                let t0 = Instant::now();
                self.s
                    .write_all(&self.buf[..size])
                    .map_err(|e| e.to_string())?;
                read_full(&mut self.s, &mut rbuf[..size], self.spin, &mut || Ok(false))?;
                samples.push(t0.elapsed().as_nanos() as u64 / 2);
                iters += 1;
                if plan.progress {
                    p.tick(iters, plan.iters);
                }
            }
            let secs = meter.secs();
            ctrl::send(ctrl_w, &Msg::new("done").with("sent", iters))?;
            while peer.get()?.is_none() {
                std::thread::sleep(Duration::from_millis(1));
            }
            return Ok((meter.side(iters, iters, secs), samples));
        }
        ctrl::send(ctrl_w, &Msg::new("done").with("sent", 0))?;
        let mut answered = 0u64;
        loop {
            let mut stop = || Ok(peer.get()?.is_some_and(|n| answered >= n));
            if !read_full(&mut self.s, &mut rbuf[..size], self.spin, &mut stop)? {
                break;
            }
            self.s.write_all(&rbuf[..size]).map_err(|e| e.to_string())?;
            answered += 1;
        }
        Ok((meter.side(0, answered, 0.0), Vec::new()))
    }
}
