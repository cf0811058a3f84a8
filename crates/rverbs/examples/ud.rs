//! Unreliable datagrams between two processes: the client sends datagrams to the
//! server's UD QP through an address handle; the server checks each one (after the
//! 40-byte GRH area every UD receive starts with) and answers to the sender's QP
//! number from the completion; the client checks the answers.
//!
//! ```text
//! cargo run -p rverbs --example ud -- server 18519
//! cargo run -p rverbs --example ud -- client 127.0.0.1 18519
//! ```

mod common;
use common::*;
use rverbs::{
    AccessFlags, AhAttr, ConnectOpts, PeerInfo, QpInitAttr, QpType, RemoteBuf, SendRequest,
    WcOpcode,
};
use std::time::Duration;

const GRH: usize = 40;
const COUNT: u64 = 20;
const QKEY: u32 = 0x1111_1111;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (role, ctx) = start("ud")?;
    let server = matches!(role, Role::Server(_));
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(64)?;
    let mtu = ctx.query_port(1)?.active_mtu.bytes();
    let slot = GRH + mtu;
    let recv = pd.reg_mr(COUNT as usize * slot, AccessFlags::LOCAL_WRITE)?;
    let send = pd.reg_mr(mtu, AccessFlags::LOCAL_WRITE)?;
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Ud, &cq))?;
    let opts = ConnectOpts {
        qkey: QKEY,
        ..ConnectOpts::default()
    };
    qp.init(&opts)?;
    for i in 0..COUNT as usize {
        qp.post_recv(i as u64, &[recv.slice(i * slot..(i + 1) * slot)])?;
    }
    let gid = ctx.gid(opts.sgid_index).ok_or("no GID")?;
    // UD: RTR and RTS take no peer; the destination is in each send.
    qp.connect(
        &PeerInfo {
            qpn: 0,
            psn: 0,
            gid,
        },
        &opts,
    )?;
    let mine = Info {
        peer: PeerInfo {
            qpn: qp.qp_num(),
            psn: 0,
            gid,
        },
        buf: RemoteBuf {
            addr: 0,
            rkey: 0,
            len: 0,
        },
    };
    let (mut oob, theirs) = Oob::exchange(role, &mine)?;
    let ah = pd.create_ah(&AhAttr::to(theirs.peer.gid, opts.sgid_index))?;
    oob.send("ready")?;
    oob.recv()?;

    let mut got = 0;
    let mut wc = [rverbs::Wc::default(); 16];
    // The client sends one datagram at a time and waits for its answer (UD may lose
    // datagrams on a real network; on loopback none are lost, and a loss here fails
    // the run by timeout rather than hanging).
    for i in 0..COUNT {
        let len = 1 + (i as usize * 97) % mtu;
        if !server {
            send.write(0, &pattern(i as u8, len));
            qp.post_send(&SendRequest::send(i, &[send.slice(0..len)]).to(
                &ah,
                theirs.peer.qpn,
                QKEY,
            ))?;
        }
        // Wait for the datagram (server) or the answer (client), skipping our sends.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let rwc = loop {
            let n = cq.poll_wait(&mut wc, Duration::from_millis(100))?;
            if let Some(w) = wc[..n].iter().find(|w| w.opcode == WcOpcode::Recv) {
                break *w;
            }
            if std::time::Instant::now() > deadline {
                return Err(format!("datagram {i} never arrived").into());
            }
        };
        if rwc.status != rverbs::WcStatus::Success || rwc.byte_len as usize != GRH + len {
            return Err(format!(
                "datagram {i}: {:?}, {} bytes (expected {})",
                rwc.status,
                rwc.byte_len,
                GRH + len
            )
            .into());
        }
        let at = rwc.wr_id as usize * slot + GRH;
        let want = pattern(if server { i as u8 } else { !(i as u8) }, len);
        if !recv.with(|b| b[at..at + len] == want[..]) {
            return Err(format!("datagram {i} holds other bytes").into());
        }
        got += 1;
        if server {
            // Answer to the QP the completion names, with the bytes inverted.
            if rwc.src_qp != theirs.peer.qpn {
                return Err(
                    format!("src_qp {:#x}, expected {:#x}", rwc.src_qp, theirs.peer.qpn).into(),
                );
            }
            send.write(0, &pattern(!(i as u8), len));
            qp.post_send(&SendRequest::send(i, &[send.slice(0..len)]).to(&ah, rwc.src_qp, QKEY))?;
        }
    }
    oob.send("done")?;
    oob.recv()?;
    println!("ud: {got} datagrams verified");
    Ok(())
}
