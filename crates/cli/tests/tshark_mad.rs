//! Captured MADs decode the same in `rverbs pcap decode` and in Wireshark's dissector:
//! a PMA ClassPortInfo / PortCounters / PortCountersExtended exchange and a BM Set
//! between two loopback contexts, captured with `OpenOptions::pcap`. Without tshark
//! the comparison is skipped loudly (`RVERBS_REQUIRE_TSHARK=1` makes it a failure).

use rverbs::mad::{self, attr, class, method, MadDest};
use rverbs::{device, Context, OpenOptions};
use std::process::Command;
use std::time::Duration;

#[test]
fn captured_mads_decode_in_rverbs_and_tshark() {
    let dir = std::env::temp_dir().join(format!("rverbs-mad-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a.pcap");
    let mut responses = Vec::new();
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
        let b = dev.open().unwrap();
        let agent = a.register_mad_agent(None).unwrap();
        let to_b = MadDest::gsi(b.gid(1).unwrap());
        for (cls, id) in [
            (class::PERF_MGMT, attr::CLASS_PORT_INFO),
            (class::PERF_MGMT, attr::PMA_PORT_COUNTERS),
            (class::PERF_MGMT, attr::PMA_PORT_COUNTERS_EXT),
            (class::BM, attr::BM_BKEY_INFO),
        ] {
            let mut m = mad::request(cls, id, 0);
            m[65] = 1;
            let r = agent
                .request(to_b, &m, Duration::from_millis(500), 3)
                .unwrap();
            responses.push(r.mad);
        }
    }
    // Our decoder: one line per MAD, with the MAD header.
    let bytes = std::fs::read(&file).unwrap();
    let mut out = Vec::new();
    let totals = rverbs_cli::pcap::decode(&bytes[..], &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!((totals.roce, totals.icrc_ok), (8, 8), "{text}");
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(" mad ")).collect();
    assert_eq!(lines.len(), 8, "{text}");
    assert!(
        lines[0].ends_with("mad PerfMgt Get attr=0x0001 mod=0x0 status=0x0000 tid=0x100000001"),
        "{}",
        lines[0]
    );
    assert!(
        lines[5].contains("mad PerfMgt GetResp attr=0x001d"),
        "{}",
        lines[5]
    );
    assert!(
        lines[7].contains("mad BM GetResp attr=0x0010"),
        "{}",
        lines[7]
    );

    let required = ["RVERBS_REQUIRE_TSHARK", "RVERBS_NO_SKIP"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    let fields = [
        "infiniband.mad.mgmtclass",
        "infiniband.mad.method",
        "infiniband.mad.attributeid",
        "infiniband.mad.transactionid",
        "infiniband.mad.status",
        "infiniband.classportinfo.capabilitymask",
        "infiniband.portcounters.portrcvpkts",
        "infiniband.portcounters_ext.portrcvpkts",
        "infiniband.portcounters_ext.portrcvdata",
    ];
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(&file)
        .args(["-T", "fields", "-E", "separator=\t"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let Ok(o) = cmd.output() else {
        assert!(
            !required,
            "RVERBS_REQUIRE_TSHARK or RVERBS_NO_SKIP is set but tshark is not installed"
        );
        eprintln!("SKIPPED: tshark is not installed; the Wireshark MAD comparison did not run");
        return;
    };
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<Vec<String>> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len(), 8);
    let num = |s: &str| -> u64 {
        match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).unwrap(),
            None => s.parse().unwrap(),
        }
    };
    for (i, row) in rows.iter().enumerate() {
        let line = lines[i];
        // Class, method, attribute, TID and status as our line shows them.
        let cls = num(&row[0]);
        assert_eq!(cls == 4, line.contains("PerfMgt"), "{line} vs {row:?}");
        let m = num(&row[1]) as u8;
        assert_eq!(
            m == method::GET_RESP,
            line.contains("GetResp"),
            "{line} vs {row:?}"
        );
        assert!(
            line.contains(&format!("attr=0x{:04x}", num(&row[2]))),
            "{line} vs {row:?}"
        );
        assert!(
            line.contains(&format!("tid=0x{:x}", num(&row[3]))),
            "{line} vs {row:?}"
        );
        assert!(
            line.contains(&format!("status=0x{:04x}", num(&row[4]))),
            "{line} vs {row:?}"
        );
    }
    // The responses' attribute fields as Wireshark reads them.
    let r = |k: usize| &responses[k];
    assert_eq!(
        num(&rows[1][5]),
        u64::from(u16::from_be_bytes([r(0)[66], r(0)[67]]))
    );
    assert_eq!(num(&rows[1][5]), 0x8700);
    assert_eq!(
        num(&rows[3][6]),
        u64::from(u32::from_be_bytes(r(1)[100..104].try_into().unwrap()))
    );
    assert_eq!(
        num(&rows[5][7]),
        u64::from_be_bytes(r(2)[96..104].try_into().unwrap())
    );
    assert_eq!(
        num(&rows[5][8]),
        u64::from_be_bytes(r(2)[80..88].try_into().unwrap())
    );
    // B had received our three PMA requests when it answered the third.
    assert_eq!(num(&rows[5][7]), 3);
    let _ = std::fs::remove_dir_all(&dir);
}
