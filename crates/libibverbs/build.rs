//! Links the cdylib as `libibverbs.so.1`: the soname, the version nodes of
//! `crates/ibverbs/abi/libibverbs.map` and `abi/librdmacm-nodes.map` (each symbol's version comes from the `.symver`
//! of its `export!` in src/), and `libibverbs.so.1` / `librdmacm.so.1` symlinks next
//! to the output so `LD_LIBRARY_PATH=target/<profile>` finds both.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let map = dir.join("../ibverbs/abi/libibverbs.map");
    println!("cargo:rerun-if-changed={}", map.display());
    // Only the nodes: rustc's own version script already lists the exported names, and
    // two lists of the same names would fight (ld keeps rustc's, unversioned).
    let text = std::fs::read_to_string(&map).expect("libibverbs.map");
    let mut nodes = nodes_only(&text);
    // librdmacm's nodes: its functions are in this file too (src/rdmacm).
    let cm = dir.join("abi/librdmacm-nodes.map");
    println!("cargo:rerun-if-changed={}", cm.display());
    nodes.push_str(&nodes_only(
        &std::fs::read_to_string(&cm).expect("librdmacm-nodes.map"),
    ));
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let nodes_map = out.join("nodes.map");
    std::fs::write(&nodes_map, nodes).unwrap();
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        nodes_map.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out.
    if let Some(profile_dir) = out.ancestors().nth(3) {
        // librdmacm.so.1 is this same file: the loader maps a file once, whichever
        // name it opens it by, so the CM and the verbs share one runtime.
        for name in ["libibverbs.so.1", "librdmacm.so.1"] {
            let link = profile_dir.join(name);
            if std::fs::symlink_metadata(&link).is_err() {
                let _ = std::os::unix::fs::symlink("libibverbs.so", &link);
            }
        }
    }
}

/// `NODE { ... } PARENT;` blocks with their contents dropped.
fn nodes_only(map: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    let mut cur = String::new();
    let mut comment = false;
    let chars: Vec<char> = map.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if comment {
            if c == '*' && chars.get(i + 1) == Some(&'/') {
                comment = false;
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            comment = true;
            i += 1;
        } else if c == '{' {
            if depth == 0 {
                out.push_str(cur.trim());
                out.push_str(" {\n");
                cur.clear();
            }
            depth += 1;
        } else if c == '}' {
            depth -= 1;
            cur.clear();
        } else if c == ';' && depth == 0 {
            out.push('}');
            let parent = cur.trim();
            if !parent.is_empty() {
                out.push(' ');
                out.push_str(parent);
            }
            out.push_str(";\n");
            cur.clear();
        } else if depth == 0 {
            cur.push(c);
        }
        i += 1;
    }
    out
}
