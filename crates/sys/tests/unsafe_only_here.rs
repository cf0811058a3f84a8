//! This crate and the C library (`crates/libibverbs`, whose extern "C" entry points
//! take C's pointers) are the only ones of the workspace allowed `unsafe`: every other
//! member takes the workspace's `unsafe_code = "forbid"` (`[lints] workspace = true`),
//! which covers all its targets (tests, benches and examples too), and so does the fuzz
//! crate. A member added without it would let `unsafe` back in unnoticed.
#![forbid(unsafe_code)]

use std::path::Path;

fn manifest(dir: &Path) -> String {
    let p = dir.join("Cargo.toml");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The lines of `toml` after the line `[table]`, up to the next table.
fn table<'a>(toml: &'a str, name: &str) -> Vec<&'a str> {
    let head = format!("[{name}]");
    toml.lines()
        .skip_while(|l| l.trim() != head)
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// The `members = [...]` of the workspace manifest.
fn members(root: &str) -> Vec<String> {
    let start = root.find("members").expect("a members list");
    let list = &root[start..];
    let list = &list[list.find('[').unwrap() + 1..list.find(']').unwrap()];
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

#[test]
fn every_other_crate_forbids_unsafe_in_all_its_targets() {
    let root_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = manifest(&root_dir);
    assert_eq!(
        table(&root, "workspace.lints.rust"),
        ["unsafe_code = \"forbid\""]
    );
    let members = members(&root);
    assert!(members.len() >= 8, "{members:?}");
    assert!(members.iter().any(|m| m == "crates/sys"), "{members:?}");
    for m in &members {
        let toml = manifest(&root_dir.join(m));
        let lints = table(&toml, "lints");
        if m == "crates/sys" {
            assert_eq!(lints, Vec::<&str>::new(), "{m}: the crate that may");
        } else if m == "crates/libibverbs" {
            let rust = table(&toml, "lints.rust");
            assert_eq!(rust, ["unsafe_code = \"allow\""], "{m}: the C library may");
        } else {
            assert_eq!(lints, ["workspace = true"], "{m}: [lints] workspace = true");
        }
    }
    let fuzz = manifest(&root_dir.join("fuzz"));
    assert_eq!(table(&fuzz, "lints.rust"), ["unsafe_code = \"forbid\""]);
}

/// The table reader above: it stops at the next table and skips comments.
#[test]
fn the_manifest_reader_reads_one_table() {
    let toml = "[a]\nx = 1\n# note\n\n[lints]\nworkspace = true\n[b]\ny = 2\n";
    assert_eq!(table(toml, "lints"), ["workspace = true"]);
    assert_eq!(table(toml, "a"), ["x = 1"]);
    assert_eq!(table(toml, "c"), Vec::<&str>::new());
    assert_eq!(
        members("[workspace]\nmembers = [\"crates/a\", \"crates/b\"]\n"),
        ["crates/a", "crates/b"]
    );
}
