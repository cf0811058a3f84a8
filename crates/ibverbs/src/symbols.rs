//! The symbol-version discipline of `libibverbs.so.1` (rdma-core's
//! `Documentation/versioning.md`, `libibverbs/libibverbs.map.in`): a released node
//! never changes, a new symbol goes into a new node, and a symbol whose ABI changed
//! keeps its old version beside the new default (33 functions have an `IBVERBS_1.0`
//! and an `IBVERBS_1.1`).
//!
//! Three committed files under `abi/` hold the facts, and this module reads them:
//! `libibverbs.symbols` (what Debian 12's library exports, from readelf),
//! `libibverbs.map` (the version script our library links with) and `imports.txt`
//! (what Debian's tools import). [`check_map`] and [`check_imports`] say where the
//! script would drop or re-version something a binary needs.

use std::collections::{BTreeMap, BTreeSet};

/// One exported symbol version: `FUNC ibv_create_qp@@IBVERBS_1.1`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Export {
    /// ELF symbol type as readelf prints it (`FUNC`, `OBJECT`).
    pub kind: String,
    pub name: String,
    pub node: String,
    /// `@@`: the version a new link binds to; `@`: kept for old binaries only.
    pub default: bool,
}

/// The parsed `libibverbs.symbols`.
#[derive(Clone, Debug, Default)]
pub struct SymbolList {
    /// Version nodes in definition order, each with the node it inherits from.
    pub nodes: Vec<(String, Option<String>)>,
    pub exports: Vec<Export>,
}

/// Splits `name@@NODE` / `name@NODE` into (name, node, default).
fn split_version(s: &str) -> Option<(&str, &str, bool)> {
    let (name, rest) = s.split_once('@')?;
    let (node, default) = match rest.strip_prefix('@') {
        Some(n) => (n, true),
        None => (rest, false),
    };
    let ok = |t: &str| !t.is_empty() && !t.contains('@');
    (ok(name) && ok(node)).then_some((name, node, default))
}

impl SymbolList {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut list = SymbolList::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |what: &str| format!("libibverbs.symbols:{}: {what}: {line:?}", i + 1);
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["node", name] => list.nodes.push(((*name).to_string(), None)),
                ["node", name, parent] => list
                    .nodes
                    .push(((*name).to_string(), Some((*parent).to_string()))),
                [kind, sym] if *kind != "node" => {
                    let (name, node, default) =
                        split_version(sym).ok_or_else(|| at("expected NAME@NODE or NAME@@NODE"))?;
                    list.exports.push(Export {
                        kind: (*kind).to_string(),
                        name: name.to_string(),
                        node: node.to_string(),
                        default,
                    });
                }
                _ => return Err(at("expected `node NAME [PARENT]` or `TYPE NAME@NODE`")),
            }
        }
        let known: BTreeSet<&str> = list.nodes.iter().map(|(n, _)| n.as_str()).collect();
        if known.len() != list.nodes.len() {
            return Err("libibverbs.symbols: a node is defined twice".into());
        }
        for e in &list.exports {
            if !known.contains(e.node.as_str()) {
                return Err(format!("{}@{}: node not defined", e.name, e.node));
            }
        }
        Ok(list)
    }
}

/// One node of a version script.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapNode {
    pub name: String,
    pub parent: Option<String>,
    pub global: BTreeSet<String>,
    /// `local: *;`: everything not listed stays hidden.
    pub local_all: bool,
}

/// A GNU ld version script, as far as libibverbs uses the syntax: named nodes with
/// `global:` names, `local: *;` and a parent after the closing brace.
#[derive(Clone, Debug, Default)]
pub struct VersionScript {
    pub nodes: Vec<MapNode>,
}

fn tokens(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c.is_whitespace() {
            rest = &rest[c.len_utf8()..];
        } else if let Some(r) = rest.strip_prefix("/*") {
            let end = r.find("*/").ok_or("unterminated comment")?;
            rest = &r[end + 2..];
        } else if "{};:*".contains(c) {
            out.push(c.to_string());
            rest = &rest[1..];
        } else if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
                .unwrap_or(rest.len());
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        } else {
            return Err(format!("unexpected character {c:?}"));
        }
    }
    Ok(out)
}

impl VersionScript {
    pub fn parse(text: &str) -> Result<Self, String> {
        let toks = tokens(text).map_err(|e| format!("libibverbs.map: {e}"))?;
        let mut it = toks.iter().map(String::as_str).peekable();
        let mut script = VersionScript::default();
        let word = |t: Option<&str>, what: &str| -> Result<String, String> {
            match t {
                Some(t) if !"{};:*".contains(t) => Ok(t.to_string()),
                other => Err(format!("libibverbs.map: expected {what}, found {other:?}")),
            }
        };
        let expect = |t: Option<&str>, want: &str| -> Result<(), String> {
            if t == Some(want) {
                Ok(())
            } else {
                Err(format!("libibverbs.map: expected {want:?}, found {t:?}"))
            }
        };
        while it.peek().is_some() {
            let mut node = MapNode {
                name: word(it.next(), "a node name")?,
                ..MapNode::default()
            };
            expect(it.next(), "{")?;
            let mut local = false;
            loop {
                match it.next() {
                    Some("}") => break,
                    Some(t @ ("global" | "local")) => {
                        expect(it.next(), ":")?;
                        local = t == "local";
                    }
                    Some("*") if local => {
                        expect(it.next(), ";")?;
                        node.local_all = true;
                    }
                    t => {
                        let name = word(t, "a symbol name")?;
                        expect(it.next(), ";")?;
                        if local {
                            return Err(format!("libibverbs.map: {name} listed as local"));
                        }
                        if !node.global.insert(name.clone()) {
                            return Err(format!("libibverbs.map: {name} twice in {}", node.name));
                        }
                    }
                }
            }
            if it.peek() != Some(&";") {
                node.parent = Some(word(it.next(), "a parent node")?);
            }
            expect(it.next(), ";")?;
            if script.nodes.iter().any(|n| n.name == node.name) {
                return Err(format!("libibverbs.map: node {} defined twice", node.name));
            }
            script.nodes.push(node);
        }
        Ok(script)
    }

    pub fn node(&self, name: &str) -> Option<&MapNode> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

/// The later private nodes that only alias a symbol of the private node the list
/// carries: newer distributions' tools import `ibv_query_gid_type` under the private
/// node of their rdma-core (`IBVERBS_PRIVATE_@IBVERBS_PABI_VERSION@` in rdma-core's
/// `libibverbs.map.in`, set in its CMakeLists.txt: 34 up to v56, 57 in v57-v58, 59
/// in v59-v63, 64 in v64, 65 on the main branch after v64).
pub const PRIVATE_ALIASES: &[(&str, &[&str])] = &[
    ("IBVERBS_PRIVATE_57", &["ibv_query_gid_type"]),
    ("IBVERBS_PRIVATE_59", &["ibv_query_gid_type"]),
    ("IBVERBS_PRIVATE_64", &["ibv_query_gid_type"]),
    ("IBVERBS_PRIVATE_65", &["ibv_query_gid_type"]),
];

/// Everything in which `map` differs from `list` and [`PRIVATE_ALIASES`]; empty when
/// the script exports exactly the listed symbols in exactly their nodes.
pub fn check_map(list: &SymbolList, map: &VersionScript) -> Vec<String> {
    let mut bad = Vec::new();
    let mut want: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (n, _) in &list.nodes {
        want.entry(n).or_default();
    }
    for e in &list.exports {
        want.entry(&e.node).or_default().insert(&e.name);
    }
    for (node, names) in PRIVATE_ALIASES {
        want.entry(node).or_default().extend(names.iter().copied());
    }
    for (n, parent) in &list.nodes {
        match map.node(n) {
            None => bad.push(format!("node {n} missing from the map")),
            Some(m) if m.parent.as_deref() != parent.as_deref() => bad.push(format!(
                "node {n} inherits from {:?} in the map, {:?} in the library",
                m.parent, parent
            )),
            Some(_) => {}
        }
    }
    for (i, m) in map.nodes.iter().enumerate() {
        if let Some(p) = &m.parent {
            if !map.nodes[..i].iter().any(|n| &n.name == p) {
                bad.push(format!(
                    "node {} inherits from {p}, not defined before it",
                    m.name
                ));
            }
        }
        let Some(names) = want.get(m.name.as_str()) else {
            bad.push(format!("node {} is not in the list", m.name));
            continue;
        };
        for n in names {
            if !m.global.contains(*n) {
                bad.push(format!("{n}@{} missing from the map", m.name));
            }
        }
        for n in &m.global {
            if !names.contains(n.as_str()) {
                bad.push(format!(
                    "{n} in node {} of the map is not exported there",
                    m.name
                ));
            }
        }
    }
    match map.nodes.first() {
        Some(first) if first.local_all => {}
        _ => bad.push("the first node must end with `local: *;`".into()),
    }
    bad
}

/// One versioned import of a tool: `ibv_devinfo ibv_query_gid_type@IBVERBS_PRIVATE_34`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Import {
    pub tool: String,
    pub name: String,
    pub node: String,
}

pub fn parse_imports(text: &str) -> Result<Vec<Import>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || format!("imports.txt:{}: expected `TOOL NAME@NODE`: {line:?}", i + 1);
        let (tool, sym) = line.split_once(' ').ok_or_else(bad)?;
        match split_version(sym.trim()) {
            Some((name, node, false)) => out.push(Import {
                tool: tool.to_string(),
                name: name.to_string(),
                node: node.to_string(),
            }),
            _ => return Err(bad()),
        }
    }
    Ok(out)
}

/// The imports the map does not export under the node the tool asks for.
pub fn check_imports(imports: &[Import], map: &VersionScript) -> Vec<String> {
    imports
        .iter()
        .filter(|i| {
            !map.node(&i.node)
                .is_some_and(|n| n.global.contains(&i.name))
        })
        .map(|i| {
            format!(
                "{} imports {}@{}, which the map does not export",
                i.tool, i.name, i.node
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str = "# c\nnode V_1.0\nnode V_1.1 V_1.0\nnode P_34\n\
                        FUNC f@V_1.0\nFUNC f@@V_1.1\nFUNC g@@V_1.0\nOBJECT o@@P_34\n";

    #[test]
    fn parses_the_list_with_default_and_compat_versions() {
        let l = SymbolList::parse(LIST).unwrap();
        assert_eq!(l.nodes[1], ("V_1.1".into(), Some("V_1.0".into())));
        assert_eq!(l.exports.len(), 4);
        assert!(!l.exports[0].default && l.exports[1].default);
        assert_eq!(l.exports[3].kind, "OBJECT");
    }

    #[test]
    fn bad_lists_are_errors() {
        for bad in [
            "FUNC f",
            "FUNC @V",
            "FUNC f@",
            "node",
            "node a b c",
            "FUNC f@V",
        ] {
            assert!(SymbolList::parse(bad).is_err(), "{bad:?}");
        }
        assert!(SymbolList::parse("node A\nnode A").is_err());
    }

    #[test]
    fn parses_a_version_script() {
        let m = VersionScript::parse(
            "/* x */ V_1.0 { global: f; g; local: *; };\nV_1.1 {\n global:\n f; } V_1.0;",
        )
        .unwrap();
        assert_eq!(m.nodes.len(), 2);
        assert!(m.nodes[0].local_all && !m.nodes[1].local_all);
        assert_eq!(m.nodes[1].parent.as_deref(), Some("V_1.0"));
        assert!(m.nodes[0].global.contains("g"));
    }

    #[test]
    fn bad_scripts_are_errors() {
        for bad in [
            "V {",
            "V { f }",
            "V { f; }",
            "V { f; f; };",
            "V { local: f; };",
            "V { }; V { };",
            "/* open",
            "V { f; } ;;",
            "V { g$; };",
        ] {
            assert!(VersionScript::parse(bad).is_err(), "{bad:?}");
        }
    }

    fn script_for(list: &SymbolList) -> String {
        let mut s = String::new();
        for (i, (n, p)) in list.nodes.iter().enumerate() {
            s += &format!("{n} {{ global: ");
            for e in list.exports.iter().filter(|e| &e.node == n) {
                s += &format!("{}; ", e.name);
            }
            if i == 0 {
                s += "local: *; ";
            }
            s += &format!("}} {};\n", p.as_deref().unwrap_or(""));
        }
        for (n, names) in PRIVATE_ALIASES {
            s += &format!("{n} {{ global: {}; }};\n", names.join("; "));
        }
        s
    }

    #[test]
    fn check_map_finds_removed_moved_and_extra_symbols() {
        let l = SymbolList::parse(LIST).unwrap();
        let good = script_for(&l);
        assert!(check_map(&l, &VersionScript::parse(&good).unwrap()).is_empty());
        // A compat version dropped, a symbol moved to a newer node, an unlisted symbol.
        let cases = [
            (
                good.replacen("V_1.0 { global: f; ", "V_1.0 { global: ", 1),
                "f@V_1.0",
            ),
            (
                good.replacen("g; local", "local", 1).replacen(
                    "V_1.1 { global: f;",
                    "V_1.1 { global: f; g;",
                    1,
                ),
                "g@V_1.0",
            ),
            (
                good.replacen("P_34 { global: o;", "P_34 { global: o; h;", 1),
                "h in node P_34",
            ),
            (good.replacen("} V_1.0;", "};", 1), "node V_1.1 inherits"),
            (good.replacen("local: *; ", "", 1), "local: *"),
        ];
        for (script, want) in cases {
            let bad = check_map(&l, &VersionScript::parse(&script).unwrap());
            assert!(
                bad.iter().any(|b| b.contains(want)),
                "{want}: {bad:?}\n{script}"
            );
        }
        // The alias nodes only carry their own names.
        let alias = good.replacen("ibv_query_gid_type;", "ibv_query_gid_type; o;", 1);
        let bad = check_map(&l, &VersionScript::parse(&alias).unwrap());
        assert!(
            bad.iter()
                .any(|b| b.contains("o in node IBVERBS_PRIVATE_57")),
            "{bad:?}"
        );
    }

    #[test]
    fn imports_are_checked_by_node() {
        let m = VersionScript::parse("V_1.0 { global: f; local: *; }; V_1.1 { global: g; } V_1.0;")
            .unwrap();
        let imports = parse_imports("t f@V_1.0\nt g@V_1.1\nu f@V_1.1\n").unwrap();
        let bad = check_imports(&imports, &m);
        assert_eq!(
            bad,
            vec!["u imports f@V_1.1, which the map does not export".to_string()]
        );
        for line in ["t", "t f", "t f@@V_1.0", "t @V"] {
            assert!(parse_imports(line).is_err(), "{line:?}");
        }
    }
}
