/work/wt/cmfix/target-perfcm/release/deps/rverbs_flow-71a50fb3f54c0556.d: crates/flow/src/lib.rs crates/flow/src/attr.rs crates/flow/src/classify.rs crates/flow/src/error.rs crates/flow/src/fields.rs crates/flow/src/text.rs crates/flow/src/uverbs.rs

/work/wt/cmfix/target-perfcm/release/deps/librverbs_flow-71a50fb3f54c0556.rlib: crates/flow/src/lib.rs crates/flow/src/attr.rs crates/flow/src/classify.rs crates/flow/src/error.rs crates/flow/src/fields.rs crates/flow/src/text.rs crates/flow/src/uverbs.rs

/work/wt/cmfix/target-perfcm/release/deps/librverbs_flow-71a50fb3f54c0556.rmeta: crates/flow/src/lib.rs crates/flow/src/attr.rs crates/flow/src/classify.rs crates/flow/src/error.rs crates/flow/src/fields.rs crates/flow/src/text.rs crates/flow/src/uverbs.rs

crates/flow/src/lib.rs:
crates/flow/src/attr.rs:
crates/flow/src/classify.rs:
crates/flow/src/error.rs:
crates/flow/src/fields.rs:
crates/flow/src/text.rs:
crates/flow/src/uverbs.rs:
