//! What the integration tests share: where the built library is, and its exported
//! functions looked up by name and version (`dlvsym`), as a C program binds them.

#![allow(dead_code)]

use std::ffi::{c_void, CString};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The cdylib `cargo test` built with this test (in `target/<profile>/deps`: the copy
/// next to it in `target/<profile>` is only refreshed by `cargo build`).
pub fn lib_path() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let so = exe.parent().expect("deps dir").join("libibverbs.so");
    assert!(so.exists(), "{} missing", so.display());
    so
}

/// A directory holding `libibverbs.so.1` and `librdmacm.so.1` (links to [`lib_path`])
/// for `LD_LIBRARY_PATH`: in the build directory, so it goes with `target/`. Test
/// binaries running at once share it; each link is replaced by a rename, which is
/// atomic, so a program starting meanwhile always finds one.
pub fn lib_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let so = lib_path();
        let d = so.parent().expect("deps dir").join("rverbs-c-libs");
        std::fs::create_dir_all(&d).unwrap();
        for name in ["libibverbs.so.1", "librdmacm.so.1"] {
            let tmp = d.join(format!("{name}.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&so, &tmp).unwrap();
            std::fs::rename(&tmp, d.join(name)).unwrap();
        }
        d
    })
    .clone()
}

struct Handle(*mut c_void);
// SAFETY: a dlopen handle is process-wide and never closed.
unsafe impl Send for Handle {}
// SAFETY: as above; dlvsym is thread-safe.
unsafe impl Sync for Handle {}

fn handle() -> *mut c_void {
    static H: OnceLock<Handle> = OnceLock::new();
    H.get_or_init(|| {
        let path = CString::new(lib_path().to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path; the library's constructors are Rust's own.
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!h.is_null(), "dlopen of our libibverbs.so.1 failed");
        Handle(h)
    })
    .0
}

/// The address of `name@version` in our library (panics if it is not exported so).
pub fn sym(name: &str, version: &str) -> *mut c_void {
    let (n, v) = (CString::new(name).unwrap(), CString::new(version).unwrap());
    // SAFETY: NUL-terminated strings and a live handle.
    let p = unsafe { libc::dlvsym(handle(), n.as_ptr(), v.as_ptr()) };
    assert!(!p.is_null(), "{name}@{version} is not exported");
    p
}

/// Looks a function up with its C type: `f!(ibv_open_device, "IBVERBS_1.1", fn(..) -> ..)`.
#[macro_export]
macro_rules! f {
    ($name:ident, $ver:literal, fn($($a:ty),*) $(-> $r:ty)?) => {{
        let p = common::sym(stringify!($name), $ver);
        // SAFETY: the symbol is the C function of this type (verbs.h's prototype).
        unsafe { std::mem::transmute::<*mut std::ffi::c_void, unsafe extern "C" fn($($a),*) $(-> $r)?>(p) }
    }};
}

/// The calling thread's errno.
pub fn errno() -> i32 {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// A free TCP port on loopback (bound then released: the tools bind it right after).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `tool` on `PATH`; a test that needs a missing tool fails, naming the `packages`.
pub fn need(tool: &str, packages: &str) -> PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join(tool);
        if p.exists() {
            return p;
        }
    }
    panic!("{tool} is not installed (Debian packages {packages})");
}

/// `tool` with `args` on this library (`LD_LIBRARY_PATH`), its output captured.
pub fn tool_cmd(tool: &str, packages: &str, args: &[&str]) -> Command {
    let mut c = Command::new(need(tool, packages));
    c.args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A finished program's stdout then stderr.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Waits for `child` up to `limit`, killing it (by its own PID) after that.
pub fn finish(mut child: Child, limit: Duration, what: &str) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("{what} did not finish in {limit:?}:\n{}", text(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `rverbs` binary: `RVERBS_BIN`, else the one of this build (`cargo build -p
/// rverbs-cli`; `cargo test --workspace` builds it too).
pub fn rverbs_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("RVERBS_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    let p = exe
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("rverbs");
    assert!(
        p.exists(),
        "{} missing: cargo build -p rverbs-cli",
        p.display()
    );
    p
}
