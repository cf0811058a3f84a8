/work/wt/cmfix/target-perfcm/release/deps/rverbs_wire-c0c7c20b91b7e072.d: crates/wire/src/lib.rs crates/wire/src/arp.rs crates/wire/src/bth.rs crates/wire/src/checksum.rs crates/wire/src/error.rs crates/wire/src/ethernet.rs crates/wire/src/ext.rs crates/wire/src/field.rs crates/wire/src/frame.rs crates/wire/src/grh.rs crates/wire/src/icrc.rs crates/wire/src/ipv4.rs crates/wire/src/ipv6.rs crates/wire/src/mad/mod.rs crates/wire/src/mad/bm.rs crates/wire/src/mad/cm.rs crates/wire/src/mad/notice.rs crates/wire/src/mad/pma.rs crates/wire/src/mad/sma.rs crates/wire/src/mad/smp.rs crates/wire/src/ndisc.rs crates/wire/src/opcode.rs crates/wire/src/packet.rs crates/wire/src/psn.rs crates/wire/src/rocev1.rs crates/wire/src/rocev2.rs crates/wire/src/udp.rs

/work/wt/cmfix/target-perfcm/release/deps/librverbs_wire-c0c7c20b91b7e072.rlib: crates/wire/src/lib.rs crates/wire/src/arp.rs crates/wire/src/bth.rs crates/wire/src/checksum.rs crates/wire/src/error.rs crates/wire/src/ethernet.rs crates/wire/src/ext.rs crates/wire/src/field.rs crates/wire/src/frame.rs crates/wire/src/grh.rs crates/wire/src/icrc.rs crates/wire/src/ipv4.rs crates/wire/src/ipv6.rs crates/wire/src/mad/mod.rs crates/wire/src/mad/bm.rs crates/wire/src/mad/cm.rs crates/wire/src/mad/notice.rs crates/wire/src/mad/pma.rs crates/wire/src/mad/sma.rs crates/wire/src/mad/smp.rs crates/wire/src/ndisc.rs crates/wire/src/opcode.rs crates/wire/src/packet.rs crates/wire/src/psn.rs crates/wire/src/rocev1.rs crates/wire/src/rocev2.rs crates/wire/src/udp.rs

/work/wt/cmfix/target-perfcm/release/deps/librverbs_wire-c0c7c20b91b7e072.rmeta: crates/wire/src/lib.rs crates/wire/src/arp.rs crates/wire/src/bth.rs crates/wire/src/checksum.rs crates/wire/src/error.rs crates/wire/src/ethernet.rs crates/wire/src/ext.rs crates/wire/src/field.rs crates/wire/src/frame.rs crates/wire/src/grh.rs crates/wire/src/icrc.rs crates/wire/src/ipv4.rs crates/wire/src/ipv6.rs crates/wire/src/mad/mod.rs crates/wire/src/mad/bm.rs crates/wire/src/mad/cm.rs crates/wire/src/mad/notice.rs crates/wire/src/mad/pma.rs crates/wire/src/mad/sma.rs crates/wire/src/mad/smp.rs crates/wire/src/ndisc.rs crates/wire/src/opcode.rs crates/wire/src/packet.rs crates/wire/src/psn.rs crates/wire/src/rocev1.rs crates/wire/src/rocev2.rs crates/wire/src/udp.rs

crates/wire/src/lib.rs:
crates/wire/src/arp.rs:
crates/wire/src/bth.rs:
crates/wire/src/checksum.rs:
crates/wire/src/error.rs:
crates/wire/src/ethernet.rs:
crates/wire/src/ext.rs:
crates/wire/src/field.rs:
crates/wire/src/frame.rs:
crates/wire/src/grh.rs:
crates/wire/src/icrc.rs:
crates/wire/src/ipv4.rs:
crates/wire/src/ipv6.rs:
crates/wire/src/mad/mod.rs:
crates/wire/src/mad/bm.rs:
crates/wire/src/mad/cm.rs:
crates/wire/src/mad/notice.rs:
crates/wire/src/mad/pma.rs:
crates/wire/src/mad/sma.rs:
crates/wire/src/mad/smp.rs:
crates/wire/src/ndisc.rs:
crates/wire/src/opcode.rs:
crates/wire/src/packet.rs:
crates/wire/src/psn.rs:
crates/wire/src/rocev1.rs:
crates/wire/src/rocev2.rs:
crates/wire/src/udp.rs:
