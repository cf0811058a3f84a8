//! RDMA atomics between two processes: the server exposes an 8-byte counter; the client
//! FETCH_ADDs to it and COMPARE_SWAPs it, checking every original value returned, and
//! the server checks the final value.
//!
//! ```text
//! cargo run -p rverbs --example atomics -- server 18518
//! cargo run -p rverbs --example atomics -- client 127.0.0.1 18518
//! ```

mod common;
use common::*;
use rverbs::{AccessFlags, ConnectOpts, QpInitAttr, QpType, SendRequest};

const START: u64 = 1000;
const ADDS: u64 = 100;
const SWAPPED: u64 = 0xdead_beef_0000_0001;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (role, ctx) = start("atomics")?;
    let server = matches!(role, Role::Server(_));
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16)?;
    let mr = pd.reg_mr(64, AccessFlags::ALL)?;
    if server {
        mr.write(0, &START.to_ne_bytes());
    }
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq))?;
    let opts = ConnectOpts::default();
    let mine = Info::rc(&qp, &opts, server.then(|| mr.remote(0..8)))?;
    let (mut oob, theirs) = Oob::exchange(role, &mine)?;
    qp.connect(&theirs.peer, &opts)?;
    oob.send("ready")?;
    oob.recv()?;

    let read = |off| {
        let mut v = [0u8; 8];
        mr.read(off, &mut v);
        u64::from_ne_bytes(v)
    };
    if server {
        oob.recv()?; // the client is done
        let v = read(0);
        if v != SWAPPED {
            return Err(format!("counter is {v:#x}, expected {SWAPPED:#x}").into());
        }
        println!("server: counter {v:#x} as expected");
        oob.send("checked")?;
    } else {
        let counter = theirs.buf;
        for i in 0..ADDS {
            qp.post_send(&SendRequest::fetch_add(i, mr.slice(8..16), counter, 1))?;
            wait_ok(&cq)?;
            if read(8) != START + i {
                return Err(
                    format!("fetch_add {i} returned {}, expected {}", read(8), START + i).into(),
                );
            }
        }
        // A compare that fails leaves the value, one that matches swaps it.
        qp.post_send(&SendRequest::cmp_swap(100, mr.slice(8..16), counter, 1, 2))?;
        wait_ok(&cq)?;
        if read(8) != START + ADDS {
            return Err(format!("failed cmp_swap returned {}", read(8)).into());
        }
        qp.post_send(&SendRequest::cmp_swap(
            101,
            mr.slice(8..16),
            counter,
            START + ADDS,
            SWAPPED,
        ))?;
        wait_ok(&cq)?;
        if read(8) != START + ADDS {
            return Err(format!("cmp_swap returned {}", read(8)).into());
        }
        println!("client: {ADDS} fetch_add and 2 cmp_swap verified");
        oob.send("done")?;
        oob.recv()?;
    }
    println!("atomics: ok");
    Ok(())
}
