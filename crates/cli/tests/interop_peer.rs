//! `rverbs interop-peer` against itself on the loopback soft device: the schedule the
//! kernel interop suite runs against interop/rdma_ops.c (WRITE, one- and multi-packet
//! READ, SEND and WRITE with immediate, FETCH_ADD, CMP_SWAP), and what a peer that breaks
//! the exchange gets.

mod common;

use rverbs_cli::interop::{run, Opts};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

fn opts(server: Option<&str>, port: u16, iters: usize) -> Opts {
    Opts {
        server: server.map(str::to_string),
        port,
        dev: None,
        gid_idx: None,
        iters,
        stats: false,
        ack_timeout: 14,
    }
}

#[test]
fn requester_and_responder_verify_every_operation() {
    let port = common::free_port();
    let responder = std::thread::spawn(move || {
        let mut out = Vec::new();
        let r = run(&opts(None, port, 3), &mut out);
        (r, String::from_utf8(out).unwrap())
    });
    let mut out = Vec::new();
    let mut r = Err(String::new());
    for _ in 0..50 {
        out.clear();
        r = run(&opts(Some("127.0.0.1"), port, 3), &mut out);
        if !matches!(&r, Err(e) if e.contains("Couldn't connect")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = String::from_utf8(out).unwrap();
    let (rr, rtext) = responder.join().unwrap();
    assert_eq!(r, Ok(()), "requester:\n{text}\nresponder:\n{rtext}");
    assert_eq!(rr, Ok(()), "responder:\n{rtext}");
    assert!(text.contains("responder: ok"), "{text}");
    assert!(
        text.contains("3 x (WRITE 512+12000, READ 512+20000"),
        "{text}"
    );
    assert!(rtext.contains("responder: ok"), "{rtext}");
}

#[test]
fn a_garbled_exchange_is_an_error_not_a_hang() {
    // A "requester" that sends a bad line: the responder names the field and fails.
    let port = common::free_port();
    let responder = std::thread::spawn(move || run(&opts(None, port, 1), &mut Vec::new()));
    let mut s = None;
    for _ in 0..50 {
        if let Ok(c) = TcpStream::connect(("127.0.0.1", port)) {
            s = Some(c);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut s = s.expect("responder never listened");
    s.write_all(b"000011:zz0000:00000000000000000000ffff7f000001:0000000000001000:00000001\n")
        .unwrap();
    let err = responder.join().unwrap().unwrap_err();
    assert!(err.contains("bad PSN"), "{err}");

    // A "responder" that closes after a bad line: the requester fails with the reason.
    let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let fake = std::thread::spawn(move || {
        let (c, _) = l.accept().unwrap();
        let mut line = String::new();
        BufReader::new(c.try_clone().unwrap())
            .read_line(&mut line)
            .unwrap();
        (&c).write_all(b"not an exchange line\n").unwrap();
        line
    });
    let err = run(&opts(Some("127.0.0.1"), port, 1), &mut Vec::new()).unwrap_err();
    let sent = fake.join().unwrap();
    assert!(
        sent.ends_with('\n') && sent.split(':').count() == 5,
        "{sent:?}"
    );
    assert!(err.contains("exchange line has 1 fields"), "{err}");
}

#[test]
fn iterations_outside_the_posted_receives_are_refused() {
    for n in [0, 65] {
        let err = run(&opts(None, common::free_port(), n), &mut Vec::new()).unwrap_err();
        assert!(err.contains("within 1..=64"), "{err}");
    }
}
