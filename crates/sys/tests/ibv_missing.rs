//! A machine without libibverbs: loading fails with an error naming the library
//! (its own process, since a process loads the library once).

#[test]
fn a_missing_library_is_named() {
    let e = rverbs_sys::ibv::load_library(Some("/nonexistent-rverbs-test/libibverbs.so.1"))
        .unwrap_err();
    assert!(
        matches!(e, rverbs_sys::ibv::LoadError::NotFound(_)),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(msg.contains("libibverbs.so.1"), "{msg}");
    // The first result stays: listing devices reports the same error.
    assert_eq!(rverbs_sys::ibv::devices().unwrap_err(), e);
}
