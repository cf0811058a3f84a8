//! `rverbs exec -- CMD ARGS...`: runs a program with rverbs' `libibverbs.so.1` and
//! `librdmacm.so.1` first on its library path, so an unmodified C verbs or RDMA CM
//! program uses the soft device.
//!
//! `librdmacm.so.1` is another name of the same file (the CM's functions are in it, so
//! that they share the verbs' runtime): build.rs links it beside the library; for a
//! directory without it (a copy of the library alone), [`with_rdmacm`] makes one.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where the library is looked for: `RVERBS_LIBIBVERBS` (a directory holding
/// `libibverbs.so.1`, or the file itself), else the directory of this executable
/// (`cargo build -p rverbs-libibverbs` puts it next to `rverbs` in `target/<profile>`).
pub fn library_dir(env: Option<OsString>, exe: Option<PathBuf>) -> Result<PathBuf, String> {
    let has_lib = |d: &Path| d.join("libibverbs.so.1").exists();
    if let Some(v) = env.filter(|v| !v.is_empty()) {
        let p = PathBuf::from(&v);
        if p.is_file() {
            return p
                .parent()
                .map(Path::to_path_buf)
                .ok_or_else(|| format!("RVERBS_LIBIBVERBS={}: no directory", p.display()));
        }
        if has_lib(&p) {
            return Ok(p);
        }
        return Err(format!(
            "RVERBS_LIBIBVERBS={}: no libibverbs.so.1 there",
            p.display()
        ));
    }
    let dir = exe
        .as_deref()
        .and_then(Path::parent)
        .ok_or("cannot tell where the rverbs executable is")?;
    if has_lib(dir) {
        return Ok(dir.to_path_buf());
    }
    Err(format!(
        "no libibverbs.so.1 in {}: build it with `cargo build --release -p rverbs-libibverbs` \
         (or point RVERBS_LIBIBVERBS at it)",
        dir.display()
    ))
}

/// A directory with both names of the library: `dir` when it has `librdmacm.so.1`,
/// else a directory under `tmp` (named after `dir`, so reused) holding a
/// `libibverbs.so.1` and a `librdmacm.so.1` link to `dir`'s library.
pub fn with_rdmacm(dir: &Path, tmp: &Path) -> Result<PathBuf, String> {
    if dir.join("librdmacm.so.1").exists() {
        return Ok(dir.to_path_buf());
    }
    let lib = dir
        .join("libibverbs.so.1")
        .canonicalize()
        .map_err(|e| format!("{}/libibverbs.so.1: {e}", dir.display()))?;
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    lib.hash(&mut h);
    let d = tmp.join(format!("rverbs-lib-{:016x}", h.finish()));
    std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    for name in ["libibverbs.so.1", "librdmacm.so.1"] {
        let link = d.join(name);
        if std::fs::read_link(&link).ok().as_deref() != Some(lib.as_path()) {
            let _ = std::fs::remove_file(&link);
            // Another rverbs exec may have made it in between: the same link.
            if let Err(e) = std::os::unix::fs::symlink(&lib, &link) {
                if e.kind() != std::io::ErrorKind::AlreadyExists {
                    return Err(format!("{}: {e}", link.display()));
                }
            }
        }
    }
    Ok(d)
}

/// `LD_LIBRARY_PATH` with `dir` first.
pub fn library_path(dir: &Path, old: Option<OsString>) -> OsString {
    let mut v = OsString::from(dir);
    if let Some(o) = old.filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(o);
    }
    v
}

/// Replaces this process with `cmd` (returns only on failure).
pub fn exec(cmd: &[OsString]) -> String {
    use std::os::unix::process::CommandExt;
    let Some((prog, args)) = cmd.split_first() else {
        return "no command given (rverbs exec -- CMD ARGS...)".into();
    };
    let dir = match library_dir(
        std::env::var_os("RVERBS_LIBIBVERBS"),
        std::env::current_exe().ok(),
    ) {
        Ok(d) => d,
        Err(e) => return e,
    };
    let dir = match with_rdmacm(&dir, &std::env::temp_dir()) {
        Ok(d) => d,
        Err(e) => return e,
    };
    let path = library_path(&dir, std::env::var_os("LD_LIBRARY_PATH"));
    let err = std::process::Command::new(prog)
        .args(args)
        .env("LD_LIBRARY_PATH", path)
        .exec();
    format!("{}: {err}", Path::new(prog).display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_directory_comes_first_on_the_path() {
        let d = std::env::temp_dir().join(format!("rverbs-exec-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let lib = d.join("libibverbs.so.1");
        std::fs::write(&lib, b"").unwrap();
        assert_eq!(library_dir(Some(d.clone().into()), None).unwrap(), d);
        assert_eq!(library_dir(Some(lib.into()), None).unwrap(), d);
        assert_eq!(library_dir(None, Some(d.join("rverbs"))).unwrap(), d);
        let empty = d.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        assert!(library_dir(Some(empty.clone().into()), None).is_err());
        assert!(library_dir(None, Some(empty.join("rverbs")))
            .unwrap_err()
            .contains("cargo build --release -p rverbs-libibverbs"));
        // Without librdmacm.so.1 beside it: a directory with both names of the file.
        let both = with_rdmacm(&d, &d.join("tmp")).unwrap();
        assert_ne!(both, d);
        for n in ["libibverbs.so.1", "librdmacm.so.1"] {
            let l = std::fs::read_link(both.join(n)).unwrap();
            assert_eq!(l, d.join("libibverbs.so.1").canonicalize().unwrap(), "{n}");
        }
        assert_eq!(with_rdmacm(&d, &d.join("tmp")).unwrap(), both, "reused");
        std::os::unix::fs::symlink("libibverbs.so.1", d.join("librdmacm.so.1")).unwrap();
        assert_eq!(with_rdmacm(&d, &d.join("tmp")).unwrap(), d);
        assert_eq!(library_path(&d, None), d.as_os_str());
        assert_eq!(
            library_path(&d, Some("/x:/y".into())),
            OsString::from(format!("{}:/x:/y", d.display()))
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
