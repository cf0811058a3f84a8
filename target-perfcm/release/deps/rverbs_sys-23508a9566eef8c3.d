/work/wt/cmfix/target-perfcm/release/deps/rverbs_sys-23508a9566eef8c3.d: crates/sys/src/lib.rs crates/sys/src/diag.rs crates/sys/src/event.rs crates/sys/src/ibv/mod.rs crates/sys/src/ibv/objects.rs crates/sys/src/mem.rs crates/sys/src/misc.rs crates/sys/src/msg.rs crates/sys/src/opt.rs crates/sys/src/packet.rs crates/sys/src/poll.rs crates/sys/src/udp.rs crates/sys/src/unix.rs

/work/wt/cmfix/target-perfcm/release/deps/librverbs_sys-23508a9566eef8c3.rlib: crates/sys/src/lib.rs crates/sys/src/diag.rs crates/sys/src/event.rs crates/sys/src/ibv/mod.rs crates/sys/src/ibv/objects.rs crates/sys/src/mem.rs crates/sys/src/misc.rs crates/sys/src/msg.rs crates/sys/src/opt.rs crates/sys/src/packet.rs crates/sys/src/poll.rs crates/sys/src/udp.rs crates/sys/src/unix.rs

/work/wt/cmfix/target-perfcm/release/deps/librverbs_sys-23508a9566eef8c3.rmeta: crates/sys/src/lib.rs crates/sys/src/diag.rs crates/sys/src/event.rs crates/sys/src/ibv/mod.rs crates/sys/src/ibv/objects.rs crates/sys/src/mem.rs crates/sys/src/misc.rs crates/sys/src/msg.rs crates/sys/src/opt.rs crates/sys/src/packet.rs crates/sys/src/poll.rs crates/sys/src/udp.rs crates/sys/src/unix.rs

crates/sys/src/lib.rs:
crates/sys/src/diag.rs:
crates/sys/src/event.rs:
crates/sys/src/ibv/mod.rs:
crates/sys/src/ibv/objects.rs:
crates/sys/src/mem.rs:
crates/sys/src/misc.rs:
crates/sys/src/msg.rs:
crates/sys/src/opt.rs:
crates/sys/src/packet.rs:
crates/sys/src/poll.rs:
crates/sys/src/udp.rs:
crates/sys/src/unix.rs:
