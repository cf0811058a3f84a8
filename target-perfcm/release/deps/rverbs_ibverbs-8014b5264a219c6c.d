/work/wt/cmfix/target-perfcm/release/deps/rverbs_ibverbs-8014b5264a219c6c.d: crates/ibverbs/src/lib.rs crates/ibverbs/src/consts.rs crates/ibverbs/src/symbols.rs crates/ibverbs/src/types/mod.rs crates/ibverbs/src/types/context.rs crates/ibverbs/src/types/queues.rs crates/ibverbs/src/types/rdmacm.rs crates/ibverbs/src/types/requests.rs

/work/wt/cmfix/target-perfcm/release/deps/librverbs_ibverbs-8014b5264a219c6c.rlib: crates/ibverbs/src/lib.rs crates/ibverbs/src/consts.rs crates/ibverbs/src/symbols.rs crates/ibverbs/src/types/mod.rs crates/ibverbs/src/types/context.rs crates/ibverbs/src/types/queues.rs crates/ibverbs/src/types/rdmacm.rs crates/ibverbs/src/types/requests.rs

/work/wt/cmfix/target-perfcm/release/deps/librverbs_ibverbs-8014b5264a219c6c.rmeta: crates/ibverbs/src/lib.rs crates/ibverbs/src/consts.rs crates/ibverbs/src/symbols.rs crates/ibverbs/src/types/mod.rs crates/ibverbs/src/types/context.rs crates/ibverbs/src/types/queues.rs crates/ibverbs/src/types/rdmacm.rs crates/ibverbs/src/types/requests.rs

crates/ibverbs/src/lib.rs:
crates/ibverbs/src/consts.rs:
crates/ibverbs/src/symbols.rs:
crates/ibverbs/src/types/mod.rs:
crates/ibverbs/src/types/context.rs:
crates/ibverbs/src/types/queues.rs:
crates/ibverbs/src/types/rdmacm.rs:
crates/ibverbs/src/types/requests.rs:
