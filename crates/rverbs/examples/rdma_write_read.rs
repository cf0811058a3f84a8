//! One-sided RDMA between two processes: the server exposes a region; the client
//! WRITEs a pattern into it, READs it back into another buffer and compares, then
//! WRITEs with immediate data to tell the server, which checks its region. The server's
//! CPU takes no part in the transfers.
//!
//! ```text
//! cargo run -p rverbs --example rdma_write_read -- server 18517
//! cargo run -p rverbs --example rdma_write_read -- client 127.0.0.1 18517
//! ```

mod common;
use common::*;
use rverbs::{AccessFlags, ConnectOpts, QpInitAttr, QpType, RemoteBuf, SendRequest, WcOpcode};

const LEN: usize = 4 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (role, ctx) = start("rdma_write_read")?;
    let server = matches!(role, Role::Server(_));
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16)?;
    // The server's region is open to remote writes and reads; the client's is local.
    let access = if server {
        AccessFlags::ALL
    } else {
        AccessFlags::LOCAL_WRITE
    };
    let mr = pd.reg_mr(2 * LEN, access)?;
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq))?;
    let opts = ConnectOpts::default();
    qp.init(&opts)?;
    if server {
        // A WRITE with immediate consumes a receive (with no buffer needed).
        qp.post_recv(1, &[])?;
    }
    let mine = Info::rc(&qp, &opts, server.then(|| mr.remote(0..LEN)))?;
    let (mut oob, theirs) = Oob::exchange(role, &mine)?;
    qp.connect(&theirs.peer, &opts)?;
    oob.send("ready")?;
    oob.recv()?;

    let data = pattern(0x5a, LEN);
    if server {
        let wc = wait_ok(&cq)?;
        if wc.opcode != WcOpcode::RecvRdmaWithImm || wc.imm_data != LEN as u32 {
            return Err(format!(
                "expected WRITE_WITH_IMM {LEN}, got {:?} {}",
                wc.opcode, wc.imm_data
            )
            .into());
        }
        if !mr.with(|b| b[..LEN] == data[..]) {
            return Err("the region does not hold what the client wrote".into());
        }
        println!("server: {LEN} bytes written by the peer verified");
    } else {
        let remote = theirs.buf;
        mr.write(0, &data);
        qp.post_send(&SendRequest::write(1, &[mr.slice(0..LEN)], remote))?;
        wait_ok(&cq)?;
        qp.post_send(&SendRequest::read(2, &[mr.slice(LEN..2 * LEN)], remote))?;
        wait_ok(&cq)?;
        if !mr.with(|b| b[LEN..] == data[..]) {
            return Err("READ returned other bytes than were written".into());
        }
        println!("client: WRITE then READ of {LEN} bytes verified");
        // A zero-length WRITE with immediate: a doorbell for the server.
        qp.post_send(&SendRequest::write(3, &[], RemoteBuf { len: 0, ..remote }).imm(LEN as u32))?;
        wait_ok(&cq)?;
    }
    oob.send("done")?;
    oob.recv()?;
    println!("rdma_write_read: ok");
    Ok(())
}
