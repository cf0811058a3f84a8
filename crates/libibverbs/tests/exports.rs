//! Seed 002's discipline on the built library: what it exports, with versions
//! (`readelf --dyn-syms`), equals the committed `abi/exports.txt`; each export has the
//! node Debian 12's libibverbs gives that name (or is one of the later private nodes of
//! `ibv_query_gid_type`); and every versioned import of Debian's tools
//! (`crates/ibverbs/abi/imports.txt`, and `librdmacm-imports.txt` of rdmacm-utils and
//! perftest, whose librdmacm.so.1 is this file too) is among them, so they load against it.

mod common;

use rverbs_ibverbs::symbols::{parse_imports, SymbolList, PRIVATE_ALIASES};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn committed(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// "TYPE NAME@@NODE" / "TYPE NAME@NODE" of every defined, versioned dynamic symbol.
fn exported() -> BTreeSet<String> {
    let out = Command::new("readelf")
        .args(["--dyn-syms", "-W"])
        .arg(common::lib_path())
        .output()
        .expect("readelf (binutils) runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut set = BTreeSet::new();
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        let numbered = w
            .first()
            .and_then(|n| n.strip_suffix(':'))
            .is_some_and(|n| n.parse::<u32>().is_ok());
        if w.len() < 8 || w[6] == "UND" || !numbered {
            continue;
        }
        assert!(w[7].contains('@'), "an unversioned export: {l}");
        set.insert(format!("{} {}", w[3], w[7]));
    }
    set
}

#[test]
fn the_library_exports_exactly_the_committed_list() {
    let want: BTreeSet<String> = committed("abi/exports.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    let got = exported();
    let missing: Vec<_> = want.difference(&got).collect();
    let extra: Vec<_> = got.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "removed or re-versioned: {missing:?}\nnew (add them to abi/exports.txt): {extra:?}"
    );
}

#[test]
fn every_export_has_debians_node_for_its_name() {
    let debian = SymbolList::parse(&committed("../ibverbs/abi/libibverbs.symbols")).unwrap();
    // librdmacm's functions are in this file too (librdmacm.so.1 is another name of it).
    let cm = SymbolList::parse(&committed("../ibverbs/abi/librdmacm.symbols")).unwrap();
    let debian_exports: Vec<_> = debian.exports.iter().chain(&cm.exports).collect();
    for e in exported() {
        let sym = e.split_whitespace().nth(1).unwrap();
        let (name, node, default) = match sym.split_once("@@") {
            Some((n, v)) => (n, v, true),
            None => {
                let (n, v) = sym.split_once('@').unwrap();
                (n, v, false)
            }
        };
        let known = debian_exports
            .iter()
            .any(|x| x.name == name && x.node == node && x.default == default)
            || PRIVATE_ALIASES
                .iter()
                .any(|(n, names)| *n == node && names.contains(&name) && !default);
        assert!(
            known,
            "{sym} is not a version Debian's libibverbs (or a later one) gives"
        );
    }
}

#[test]
fn every_import_of_debians_tools_resolves() {
    let mut imports = parse_imports(&committed("../ibverbs/abi/imports.txt")).unwrap();
    imports.extend(parse_imports(&committed("../ibverbs/abi/librdmacm-imports.txt")).unwrap());
    let got = exported();
    let names: BTreeSet<String> = got
        .iter()
        .map(|e| e.split_whitespace().nth(1).unwrap().replace("@@", "@"))
        .collect();
    let missing: Vec<String> = imports
        .iter()
        .map(|i| format!("{} {}@{}", i.tool, i.name, i.node))
        .filter(|s| !names.contains(s.split_whitespace().nth(1).unwrap()))
        .collect();
    assert!(
        missing.is_empty(),
        "imports our library lacks:\n{}",
        missing.join("\n")
    );
}
