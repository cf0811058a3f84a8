//! Tests of perftest's exchange: its key message, versions, reports and options.

use super::*;

#[test]
fn receive_span_is_first_to_last_or_from_the_wait_when_one_batch() {
    let t0 = Instant::now();
    let ms = |n| t0 + Duration::from_millis(n);
    // perftest's span.
    assert_eq!(rx_span(t0, Some(ms(3)), Some(ms(8))), 0.005);
    // Every message in one poll: from the start of the wait.
    assert_eq!(rx_span(t0, Some(ms(4)), Some(ms(4))), 0.004);
    // A receive before the wait started (preposted, early peer): from it.
    assert_eq!(rx_span(ms(2), Some(ms(1)), Some(ms(1))), 0.0);
    assert_eq!(rx_span(ms(2), Some(ms(1)), Some(ms(5))), 0.004);
    assert_eq!(rx_span(t0, None, None), 0.0);
}

#[test]
fn key_message_round_trips_in_perftests_layout() {
    let d = Dest {
        lid: 0,
        out_reads: 16,
        qpn: 0x11,
        psn: 0xabcdef,
        rkey: 0x1234,
        vaddr: 0x5555_0000_1000,
        gid: Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 2]),
        srqn: 0,
    };
    let m = encode(&d);
    let text = std::str::from_utf8(&m[..107]).unwrap();
    assert_eq!(
        text,
        "0000:0010:000011:abcdef:00001234:0000555500001000:\
         00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:02:00000000:"
    );
    assert_eq!(m[107], 0);
    assert_eq!(decode(&m), Ok(d));
    assert!(decode(b"0000:0010").is_err());
    assert!(decode(&[0xff; 108]).is_err());
    let mut bad = m;
    bad[0] = b'z';
    assert!(decode(&bad).is_err());
    // A QPN wider than 24 bits or a GID byte above 0xff is refused, not truncated.
    let wide = String::from_utf8(m.to_vec())
        .unwrap()
        .replacen("000011", "f00011", 1)
        .replacen(":0a:", ":1a0:", 1);
    assert!(decode(&wide.as_bytes()[..107]).is_err());
}

#[test]
fn versions_are_read_like_atof() {
    assert_eq!(parse_version(b"6.06\0\0\0\0\0\0\0\0\0\0\0\0"), Ok(606));
    assert_eq!(parse_version(b"6.29"), Ok(629));
    assert_eq!(parse_version(b"5.7"), Ok(570));
    assert_eq!(parse_version(b"6.06.1-beta"), Ok(606));
    assert!(parse_version(b"\0\0\0\0").is_err());
    assert!(parse_version(b"beta").is_err());
    assert!(parse_version(&[0xff; 16]).is_err());
    assert!(parse_version(b"99999999999999").is_err());
}

#[test]
fn mtu_and_sys_data() {
    assert_eq!(parse_mtu(b"3\0"), Some(Mtu::M1024));
    assert_eq!(parse_mtu(b"5\0"), Some(Mtu::M4096));
    assert_eq!(parse_mtu(b"9\0"), None);
    assert_eq!(parse_mtu(b"\0\0"), None);
    assert_eq!(
        parse_sys(&4096i32.to_be_bytes(), &64i32.to_be_bytes()),
        Ok((4096, 64))
    );
    assert_eq!(
        parse_sys(&65536i32.to_be_bytes(), &128i32.to_be_bytes()),
        Ok((65536, 128))
    );
    assert_eq!(
        parse_sys(&512i32.to_be_bytes(), &32i32.to_be_bytes()),
        Ok((4096, 64))
    );
    assert!(parse_sys(&(-1i32).to_be_bytes(), &64i32.to_be_bytes()).is_err());
    assert!(parse_sys(&i32::MAX.to_be_bytes(), &64i32.to_be_bytes()).is_err());
    assert!(parse_sys(&[0; 3], &[0; 4]).is_err());
}

#[test]
fn bw_reports_round_trip_and_bad_figures_are_refused() {
    let r = BwReport {
        size: 65536,
        iters: 200,
        bw_peak: 12.5,
        bw_avg: 12.0,
        msg_rate: 0.000192,
    };
    assert_eq!(BwReport::from_fields(&r.fields()), Ok(r));
    // 200 × 64 KiB at 12.5 MiB/s = 1 s.
    let rep = BwReport { bw_avg: 12.5, ..r }.report();
    assert_eq!((rep.msgs, rep.bytes, rep.secs), (200, 13_107_200, 1.0));
    for bad in [f64::NAN, f64::INFINITY, -1.0] {
        let f = BwReport { bw_avg: bad, ..r }.fields();
        assert!(BwReport::from_fields(&f).is_err());
    }
    // Zero figures (what perftest's server sends its client) are a valid report.
    assert!(BwReport::from_fields(&BwReport::default().fields()).is_ok());
}

#[test]
fn latency_is_the_gap_between_posts() {
    let t0 = Instant::now();
    let t: Vec<Instant> = [0u64, 10_000, 30_000]
        .iter()
        .map(|n| t0 + Duration::from_nanos(*n))
        .collect();
    assert_eq!(lat_samples(&t, true), vec![5_000, 10_000]);
    assert_eq!(lat_samples(&t, false), vec![10_000, 20_000]);
    assert!(lat_samples(&t[..1], true).is_empty());
}

#[test]
fn bw_completion_moderation_is_capped_at_the_tx_depth() {
    let o = |cq_mod, depth, post_list| Opts {
        cq_mod,
        depth,
        post_list,
        ..super::super::tests::opts()
    };
    // `-Q 200 -t 128` signals every 128th request (perftest's force_dependecies).
    assert_eq!(bw_cq_mod(&o(Some(200), 128, 1)), 128);
    assert_eq!(bw_cq_mod(&o(Some(50), 128, 1)), 50);
    assert_eq!(bw_cq_mod(&o(None, 128, 1)), 32);
    assert_eq!(bw_cq_mod(&o(None, 128, 8)), 8);
    // The post list is checked against the lowered -Q: `-l 32 -t 32 -Q 64` is
    // -Q 32, a divisor of 32.
    let mut l = o(Some(64), 32, 32);
    l.perftest = true;
    l.iters = 64;
    assert!(check(&l).is_ok(), "{:?}", check(&l));
    l.cq_mod = Some(24);
    assert!(check(&l).is_err());
}

#[test]
fn tools_and_their_defaults() {
    assert_eq!(Tool::of(Op::Write, Kind::Bw), Some(Tool::WriteBw));
    assert_eq!(Tool::of(Op::Tcp, Kind::Bw), None);
    assert_eq!(Tool::WriteBw.default_iters(), 5000);
    assert_eq!(Tool::SendBw.default_iters(), 1000);
    assert_eq!(Tool::AtomicLat.name(), "ib_atomic_lat");
    assert_eq!(Tool::WriteLat.handshakes(), 4);
    assert_eq!(Tool::SendLat.handshakes(), 3);
}
