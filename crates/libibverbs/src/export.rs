//! `export!`: a function exported under its rdma-core name and symbol version.
//!
//! rustc gives a cdylib its own version script (every `#[no_mangle]` name, unversioned),
//! so versions come from the assembler instead: a global stub jumps to the Rust
//! function, and `.symver stub, name@@NODE, remove` renames it to the versioned name
//! (binutils 2.35+). The nodes themselves are defined by the version script that
//! build.rs derives from `crates/ibverbs/abi/libibverbs.map`. A name exported under
//! several nodes (`ibv_query_gid_type`) gets one `export!` per node with its own tag.

/// `export!(func, "NODE")`: `func` as the default version `func@@NODE`.
/// `export!(func as "name", "NODE", tag)`: `func` as `name@NODE` (not the default).
macro_rules! export {
    ($f:ident, $node:literal) => {
        export!(@stub $f, stringify!($f), concat!("@", $node), "d");
    };
    ($f:ident as $name:literal, $node:literal, $tag:literal) => {
        export!(@stub $f, $name, $node, $tag);
    };
    (@stub $f:ident, $name:expr, $ver:expr, $tag:expr) => {
        #[cfg(target_arch = "x86_64")]
        std::arch::global_asm!(
            concat!(".globl __rvx_", $name, "_", $tag),
            concat!(".type __rvx_", $name, "_", $tag, ",@function"),
            concat!("__rvx_", $name, "_", $tag, ":"),
            "jmp {f}",
            concat!(".symver __rvx_", $name, "_", $tag, ",", $name, "@", $ver, ",remove"),
            f = sym $f,
        );
        #[cfg(target_arch = "aarch64")]
        std::arch::global_asm!(
            concat!(".globl __rvx_", $name, "_", $tag),
            concat!(".type __rvx_", $name, "_", $tag, ",%function"),
            concat!("__rvx_", $name, "_", $tag, ":"),
            "b {f}",
            concat!(".symver __rvx_", $name, "_", $tag, ",", $name, "@", $ver, ",remove"),
            f = sym $f,
        );
    };
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("export! has stubs for x86_64 and aarch64 only");
