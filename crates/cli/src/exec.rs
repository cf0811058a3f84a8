//! `rverbs exec -- CMD ARGS...`: runs a program with rverbs' `libibverbs.so.1` first
//! on its library path, so an unmodified C verbs program uses the soft device.

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
        assert_eq!(library_path(&d, None), d.as_os_str());
        assert_eq!(
            library_path(&d, Some("/x:/y".into())),
            OsString::from(format!("{}:/x:/y", d.display()))
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
