//! What the types forbid: each program in `tests/ui/` must fail to compile, with the
//! error recorded beside it (see the crate documentation's *Memory safety* section).

#[test]
fn memory_safety_rules_are_enforced_by_the_compiler() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
