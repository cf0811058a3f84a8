//! The harness the layout tests share: a C program built against an installed header
//! prints one line per row (`key a b`), and each line must equal the Rust side's numbers.
//! Without gcc or the header a test says SKIPPED, and fails when `RVERBS_NO_SKIP` is set.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// An installed C header and the Debian package that brings it.
pub struct Header {
    /// As written after `#include`: `<infiniband/verbs.h>`.
    pub include: &'static str,
    pub package: &'static str,
}

/// What one layout line says: the C spelling of the type or field, and its numbers.
pub struct Row {
    /// `struct ibv_wc` for a type, `struct ibv_wc|wr_id` for a field.
    pub key: String,
    /// The C expressions that print the same two numbers.
    pub c: String,
    /// Size (type) or offset (field).
    pub a: usize,
    /// Alignment (type) or size (field).
    pub b: usize,
}

/// The size of the field a raw-borrow closure points at.
pub fn field_size<T, F>(_: fn(&T) -> *const F) -> usize {
    std::mem::size_of::<F>()
}

/// A fresh directory for this test's files under cargo's per-target temporary directory.
pub fn work_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("layout-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// gcc and the header, if they are there; without them the test says so (and fails
/// under `RVERBS_NO_SKIP`).
pub fn gcc_and_header(dir: &Path, h: &Header) -> bool {
    let probe = dir.join("probe.c");
    std::fs::write(
        &probe,
        format!("#include {}\nint main(void) {{ return 0; }}\n", h.include),
    )
    .unwrap();
    let ok = Command::new("gcc")
        .arg("-fsyntax-only")
        .arg(&probe)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("RVERBS_NO_SKIP").is_none(),
            "gcc or {} ({}) is missing and RVERBS_NO_SKIP is set",
            h.include,
            h.package
        );
        eprintln!(
            "SKIPPED: needs gcc and {}; the layouts were not checked",
            h.package
        );
    }
    ok
}

/// Compiles `body` (statements of `main`) against the header, runs it and returns what
/// it prints, as `key -> (a, b)`.
pub fn run_c(dir: &Path, h: &Header, body: &str) -> BTreeMap<String, (i128, i128)> {
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    let program = format!(
        "#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n#include {}\n\
         int main(void)\n{{\n{body}\treturn 0;\n}}\n",
        h.include
    );
    std::fs::write(&src, program).unwrap();
    let o = Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "gcc failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = Command::new(&exe).output().unwrap();
    assert!(o.status.success());
    let mut out = BTreeMap::new();
    for line in String::from_utf8(o.stdout).unwrap().lines() {
        let mut w = line.rsplitn(3, ' ');
        let (b, a, key) = (w.next().unwrap(), w.next().unwrap(), w.next().unwrap());
        out.insert(key.to_string(), (a.parse().unwrap(), b.parse().unwrap()));
    }
    let _ = std::fs::remove_dir_all(dir);
    out
}

/// Prints every row from C and asserts each equals the Rust side; returns how many rows
/// C printed (a key printed twice counts once).
pub fn check_rows(dir: &Path, h: &Header, rows: &[Row]) -> usize {
    let mut body = String::new();
    for r in rows {
        body += &format!("\tprintf(\"%s %zu %zu\\n\", \"{}\", {});\n", r.key, r.c);
    }
    let c = run_c(dir, h, &body);
    let bad: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let rust = (r.a as i128, r.b as i128);
            let got = c.get(&r.key);
            (got != Some(&rust)).then(|| {
                format!(
                    "{}: C (offset/size, size/align) {got:?}, Rust {rust:?}",
                    r.key
                )
            })
        })
        .collect();
    assert!(
        bad.is_empty(),
        "layouts differ from {}:\n{}",
        h.include,
        bad.join("\n")
    );
    assert_eq!(c.len(), rows.len(), "a row printed twice");
    c.len()
}

/// Prints every constant from C (and `extra` lines of the same form) and asserts each
/// equals the Rust value; returns what C printed.
pub fn check_consts(
    dir: &Path,
    h: &Header,
    consts: &[(&str, i128)],
    extra: &str,
) -> BTreeMap<String, (i128, i128)> {
    let mut body = String::new();
    for (name, _) in consts {
        body += &format!("\tprintf(\"%s %lld 0\\n\", \"{name}\", (long long){name});\n");
    }
    body += extra;
    let c = run_c(dir, h, &body);
    let bad: Vec<String> = consts
        .iter()
        .filter_map(|(name, v)| {
            let got = c.get(*name).map(|x| x.0);
            (got != Some(*v)).then(|| format!("{name}: C {got:?}, Rust {v}"))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "constants differ from {}:\n{}",
        h.include,
        bad.join("\n")
    );
    c
}
