//! `RVERBS_PCAP` captures: every datagram two loopback contexts exchange (SEND, WRITE,
//! READ, atomics, ACKs) is in the files with headers as on the wire, every ICRC verifies
//! in `rverbs pcap decode`, and Wireshark's dissector reads them without a malformed
//! packet (when tshark is installed; CI requires it).

use rverbs::*;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn wait(cq: &Cq) -> Wc {
    let mut out = [Wc::default()];
    assert_eq!(cq.poll_wait(&mut out, Duration::from_secs(10)).unwrap(), 1);
    assert_eq!(out[0].status, WcStatus::Success);
    out[0]
}

#[test]
fn captures_decode_cleanly() {
    let dir = std::env::temp_dir().join(format!("rverbs-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files: Vec<PathBuf> = ["a.pcap", "b.pcap"].iter().map(|f| dir.join(f)).collect();
    {
        let dev = device(None).unwrap();
        let open = |p: &PathBuf| {
            Context::open_with(
                dev.clone(),
                &OpenOptions {
                    pcap: Some(p.clone()),
                    ..Default::default()
                },
            )
        };
        let (a, b) = (open(&files[0]).unwrap(), open(&files[1]).unwrap());
        let (pda, pdb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let (cqa, cqb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
        let (ma, mb) = (
            pda.reg_mr(8192, AccessFlags::ALL).unwrap(),
            pdb.reg_mr(8192, AccessFlags::ALL).unwrap(),
        );
        let qa = pda.create_qp(&QpInitAttr::new(QpType::Rc, &cqa)).unwrap();
        let qb = pdb.create_qp(&QpInitAttr::new(QpType::Rc, &cqb)).unwrap();
        let o = ConnectOpts {
            mtu: Mtu::M1024,
            ..ConnectOpts::default()
        };
        qa.connect(
            &PeerInfo {
                qpn: qb.qp_num(),
                psn: 0xfffffe,
                gid: b.gid(1).unwrap(),
            },
            &ConnectOpts { psn: 0x100, ..o },
        )
        .unwrap();
        qb.connect(
            &PeerInfo {
                qpn: qa.qp_num(),
                psn: 0x100,
                gid: a.gid(1).unwrap(),
            },
            &ConnectOpts { psn: 0xfffffe, ..o },
        )
        .unwrap();
        ma.write(0, &[7u8; 3000]);
        qb.post_recv(1, &[mb.slice(0..4096)]).unwrap();
        qa.post_send(&SendRequest::send(1, &[ma.slice(0..3000)]).imm(0xabcd))
            .unwrap();
        wait(&cqb);
        wait(&cqa);
        // Over loopback a plain WRITE leaves as WRITE ONLY pieces (`Config::write_pieces`);
        // one with immediate as FIRST, MIDDLE and LAST.
        qa.post_send(&SendRequest::write(
            2,
            &[ma.slice(0..2500)],
            mb.remote(4096..6596),
        ))
        .unwrap();
        wait(&cqa);
        qb.post_recv(6, &[mb.slice(0..16)]).unwrap();
        qa.post_send(
            &SendRequest::write(7, &[ma.slice(0..2500)], mb.remote(4096..6596)).imm(0x1234),
        )
        .unwrap();
        wait(&cqa);
        wait(&cqb);
        qa.post_send(&SendRequest::read(
            3,
            &[ma.slice(4096..6596)],
            mb.remote(4096..6596),
        ))
        .unwrap();
        wait(&cqa);
        qa.post_send(&SendRequest::fetch_add(
            4,
            ma.slice(8000..8008),
            mb.remote(8000..8008),
            3,
        ))
        .unwrap();
        wait(&cqa);
        qa.post_send(&SendRequest::cmp_swap(
            5,
            ma.slice(8000..8008),
            mb.remote(8000..8008),
            3,
            9,
        ))
        .unwrap();
        wait(&cqa);
    } // contexts closed: files flushed
    for f in &files {
        let mut out = Vec::new();
        let totals = rverbs_cli::pcap::decode(std::fs::File::open(f).unwrap(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(totals.roce >= 14, "{}: {text}", f.display());
        assert_eq!(
            (totals.icrc_bad, totals.malformed),
            (0, 0),
            "{}: {text}",
            f.display()
        );
        for op in [
            "RC_SEND_FIRST",
            "RC_RDMA_WRITE_ONLY",
            "RC_RDMA_WRITE_FIRST",
            "RC_RDMA_WRITE_MIDDLE",
            "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
            "RC_RDMA_READ_REQUEST",
            "RC_FETCH_ADD",
            "RC_COMPARE_SWAP",
            "RC_ACKNOWLEDGE",
        ] {
            assert!(
                text.contains(op),
                "{op} missing from {}:\n{text}",
                f.display()
            );
        }
        match Command::new("tshark").arg("-r").arg(f).output() {
            Ok(o) => {
                let all = format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                assert!(
                    o.status.success(),
                    "tshark failed on {}: {all}",
                    f.display()
                );
                assert!(
                    !all.contains("Malformed"),
                    "tshark: malformed packet in {}:\n{all}",
                    f.display()
                );
                assert!(
                    all.contains("RRoCE"),
                    "tshark did not dissect RoCE v2 in {}:\n{all}",
                    f.display()
                );
            }
            Err(_) => {
                assert!(
                    ["RVERBS_REQUIRE_TSHARK", "RVERBS_NO_SKIP"]
                        .iter()
                        .all(|v| std::env::var_os(v).is_none()),
                    "tshark required (RVERBS_REQUIRE_TSHARK or RVERBS_NO_SKIP) but missing"
                );
                eprintln!("SKIPPED: tshark is not installed; the Wireshark check of our captures did not run");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Between two contexts of this host the same-host rings carry datagrams without
/// their ICRC; a capture on the receiving side only still records every one with a
/// valid ICRC (computed before the tap sees it), and both sides' traffic arrives.
#[test]
fn a_capture_on_one_side_of_the_rings_records_valid_icrcs() {
    let dir = std::env::temp_dir().join(format!("rverbs-capture1-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a.pcap");
    {
        let dev = device(None).unwrap();
        let a = Context::open_with(
            dev.clone(),
            &OpenOptions {
                pcap: Some(file.clone()),
                ..Default::default()
            },
        )
        .unwrap();
        let b = Context::open_with(dev, &OpenOptions::default()).unwrap();
        let (pda, pdb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let (cqa, cqb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
        let (ma, mb) = (
            pda.reg_mr(8192, AccessFlags::ALL).unwrap(),
            pdb.reg_mr(8192, AccessFlags::ALL).unwrap(),
        );
        let qa = pda.create_qp(&QpInitAttr::new(QpType::Rc, &cqa)).unwrap();
        let qb = pdb.create_qp(&QpInitAttr::new(QpType::Rc, &cqb)).unwrap();
        let peer = |q: &Qp, c: &Context| PeerInfo {
            qpn: q.qp_num(),
            psn: 0,
            gid: c.gid(1).unwrap(),
        };
        qa.connect(&peer(&qb, &b), &ConnectOpts::default()).unwrap();
        qb.connect(&peer(&qa, &a), &ConnectOpts::default()).unwrap();
        mb.write(0, &[5u8; 3000]);
        for i in 0..4 {
            qa.post_recv(i, &[ma.slice(0..4096)]).unwrap();
            qb.post_send(&SendRequest::send(i, &[mb.slice(0..3000)]))
                .unwrap();
            assert_eq!(wait(&cqa).byte_len, 3000);
            wait(&cqb);
        }
        assert_eq!(&ma.to_vec()[..3000], &[5u8; 3000][..]);
        let (sa, sb) = (a.same_host_stats().unwrap(), b.same_host_stats().unwrap());
        assert!(
            sa.rx_datagrams >= 4 && sb.tx_datagrams >= 4,
            "not over the rings: {sa:?} {sb:?}"
        );
        assert_eq!(a.counters().rx_icrc_errors, 0);
    }
    let mut out = Vec::new();
    let totals = rverbs_cli::pcap::decode(std::fs::File::open(&file).unwrap(), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(totals.roce >= 8, "{text}");
    assert_eq!((totals.icrc_bad, totals.malformed), (0, 0), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `OpenOptions::write_pieces` decides how a multi-packet RC WRITE leaves, whatever the
/// device's default: forced off, FIRST / MIDDLE / LAST with one RETH; forced on, WRITE
/// ONLY pieces. The data lands whole either way.
#[test]
fn write_pieces_option_is_honoured() {
    let dir = std::env::temp_dir().join(format!("rverbs-pieces-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for pieces in [false, true] {
        let file = dir.join(format!("{pieces}.pcap"));
        {
            let dev = device(None).unwrap();
            let open = |pcap: Option<PathBuf>| {
                Context::open_with(
                    dev.clone(),
                    &OpenOptions {
                        pcap,
                        write_pieces: Some(pieces),
                        ..Default::default()
                    },
                )
                .unwrap()
            };
            let (a, b) = (open(Some(file.clone())), open(None));
            let (pda, pdb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
            let (cqa, cqb) = (a.create_cq(8).unwrap(), b.create_cq(8).unwrap());
            let ma = pda.reg_mr(4096, AccessFlags::ALL).unwrap();
            let mb = pdb.reg_mr(4096, AccessFlags::ALL).unwrap();
            let qa = pda.create_qp(&QpInitAttr::new(QpType::Rc, &cqa)).unwrap();
            let qb = pdb.create_qp(&QpInitAttr::new(QpType::Rc, &cqb)).unwrap();
            let o = ConnectOpts {
                mtu: Mtu::M1024,
                ..ConnectOpts::default()
            };
            let peer = |q: &Qp, c: &Context| PeerInfo {
                qpn: q.qp_num(),
                psn: 0,
                gid: c.gid(1).unwrap(),
            };
            qa.connect(&peer(&qb, &b), &o).unwrap();
            qb.connect(&peer(&qa, &a), &o).unwrap();
            let data: Vec<u8> = (0..2500).map(|i| (i % 251) as u8).collect();
            ma.write(0, &data);
            qa.post_send(&SendRequest::write(
                1,
                &[ma.slice(0..2500)],
                mb.remote(1000..3500),
            ))
            .unwrap();
            wait(&cqa);
            assert_eq!(mb.to_vec()[1000..3500], data[..], "pieces {pieces}");
        }
        let mut out = Vec::new();
        rverbs_cli::pcap::decode(std::fs::File::open(&file).unwrap(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let (only, first) = (
            text.matches("RC_RDMA_WRITE_ONLY").count(),
            text.matches("RC_RDMA_WRITE_FIRST").count(),
        );
        // 2500 bytes at a 1024-byte MTU: three packets.
        let want = if pieces { (3, 0) } else { (0, 1) };
        assert_eq!((only, first), want, "pieces {pieces}:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
