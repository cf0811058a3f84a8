//! RC SEND/RECV between two processes: the client sends messages of several sizes (0 B
//! to 1 MiB, one with immediate data), the server checks every byte and echoes each
//! message back, and the client checks the echo.
//!
//! ```text
//! cargo run -p rverbs --example rc_send_recv -- server 18516
//! cargo run -p rverbs --example rc_send_recv -- client 127.0.0.1 18516
//! ```

mod common;
use common::*;
use rverbs::{AccessFlags, ConnectOpts, QpInitAttr, QpType, SendRequest, WcFlags};

const SIZES: [usize; 5] = [0, 1, 4096, 100_000, 1 << 20];
const MAX: usize = 1 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (role, ctx) = start("rc_send_recv")?;
    let server = matches!(role, Role::Server(_));
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(64)?;
    let send_buf = pd.reg_mr(MAX, AccessFlags::LOCAL_WRITE)?;
    let recv_buf = pd.reg_mr(MAX, AccessFlags::LOCAL_WRITE)?;
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq))?;
    let opts = ConnectOpts::default();
    // Receives must be posted before the peer can send: post one, then connect.
    qp.init(&opts)?;
    qp.post_recv(0, &[recv_buf.all()])?;
    let mine = Info::rc(&qp, &opts, None)?;
    let (mut oob, theirs) = Oob::exchange(role, &mine)?;
    qp.connect(&theirs.peer, &opts)?;
    oob.send("ready")?;
    oob.recv()?; // both sides connected, receives posted

    for (i, &len) in SIZES.iter().enumerate() {
        let seed = i as u8;
        if server {
            let wc = wait_ok(&cq)?;
            check(&recv_buf, wc.byte_len as usize, &pattern(seed, len))?;
            if i == 2 && (!wc.wc_flags.contains(WcFlags::WITH_IMM) || wc.imm_data != 0xfeed) {
                return Err(format!(
                    "expected immediate data 0xfeed, got {:?} {:#x}",
                    wc.wc_flags, wc.imm_data
                )
                .into());
            }
            // Echo: copy out, repost the receive, send it back.
            let data = recv_buf.with(|b| b[..len].to_vec());
            qp.post_recv(i as u64 + 1, &[recv_buf.all()])?;
            send_buf.write(0, &data);
            qp.post_send(&SendRequest::send(i as u64, &[send_buf.slice(0..len)]))?;
            wait_ok(&cq)?;
        } else {
            send_buf.write(0, &pattern(seed, len));
            let mut wr = SendRequest::send(i as u64, &[send_buf.slice(0..len)]);
            if i == 2 {
                wr = wr.imm(0xfeed);
            }
            qp.post_send(&wr)?;
            // Our send's completion and the echo, in either order.
            let (a, b) = (wait_ok(&cq)?, wait_ok(&cq)?);
            let echo = if a.opcode == rverbs::WcOpcode::Recv {
                a
            } else {
                b
            };
            check(&recv_buf, echo.byte_len as usize, &pattern(seed, len))?;
            qp.post_recv(i as u64 + 1, &[recv_buf.all()])?;
        }
        println!("{len} bytes ok");
    }
    oob.send("done")?;
    oob.recv()?;
    println!("rc_send_recv: all {} messages verified", SIZES.len());
    Ok(())
}

fn check(mr: &rverbs::Mr, got_len: usize, want: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
    if got_len != want.len() {
        return Err(format!("received {got_len} bytes, expected {}", want.len()).into());
    }
    if mr.with(|b| b[..want.len()] != *want) {
        return Err(format!("the {} bytes received differ from those sent", want.len()).into());
    }
    Ok(())
}
