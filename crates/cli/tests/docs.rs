//! Every command the README and `docs/*.md` show in a fenced block marked `tested`
//! (```` ```text tested ````) runs as written against this build's `rverbs`, from the
//! repository root: each `$ rverbs ...` line (optionally after `VAR=value` words) must
//! exit 0 within its time bound. A line whose comment starts with `server` runs in the
//! background; the lines after it are its clients (retried while the server is not
//! listening yet), and it must end by itself, successfully, once they are done.
//! `pingpong` and `perf` lines without `-p` get `-p` with a port chosen at run time
//! (the same for a server and its clients), so the default port 18515 is never used.
//! The expected output shown under a command is for the reader, not compared (it holds
//! addresses, QP numbers and timings).

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One `$ ...` line of a tested block.
#[derive(Debug, Clone)]
struct Cmd {
    /// Where it is (file:line), for messages.
    at: String,
    env: Vec<(String, String)>,
    args: Vec<String>,
    server: bool,
}

/// Where the parser is: outside a fenced block, inside a tested one (its commands so
/// far) or inside another one.
enum Fence {
    Out,
    Tested(Vec<Cmd>),
    Other,
}

/// The commands of the tested blocks of `text`, block by block.
fn tested_blocks(name: &str, text: &str) -> Vec<Vec<Cmd>> {
    let mut blocks = Vec::new();
    let mut state = Fence::Out;
    for (i, line) in text.lines().enumerate() {
        let at = format!("{name}:{}", i + 1);
        if let Some(info) = line.trim_start().strip_prefix("```") {
            state = match std::mem::replace(&mut state, Fence::Out) {
                Fence::Out if info.split_whitespace().any(|w| w == "tested") => {
                    Fence::Tested(Vec::new())
                }
                Fence::Out => Fence::Other,
                Fence::Tested(b) => {
                    blocks.push(b);
                    Fence::Out
                }
                Fence::Other => Fence::Out,
            };
            continue;
        }
        let (Fence::Tested(b), Some(cmd)) = (&mut state, line.strip_prefix("$ ")) else {
            continue;
        };
        let (cmd, comment) = match cmd.split_once(" #") {
            Some((c, k)) => (c, k.trim()),
            None => (cmd, ""),
        };
        assert!(
            !cmd.contains(['\'', '"', '|', '>', '<', '&', ';', '$', '`']),
            "{at}: a tested command is plain words (no quoting or shell syntax): {cmd}"
        );
        let mut words = cmd.split_whitespace().map(str::to_string).peekable();
        let mut env = Vec::new();
        while let Some((k, v)) = words.peek().and_then(|w| w.split_once('=')) {
            env.push((k.to_string(), v.to_string()));
            words.next();
        }
        assert_eq!(
            words.next().as_deref(),
            Some("rverbs"),
            "{at}: a tested command runs rverbs"
        );
        b.push(Cmd {
            at,
            env,
            args: words.collect(),
            server: comment.starts_with("server"),
        });
    }
    assert!(
        matches!(state, Fence::Out),
        "{name}: a fenced block is not closed"
    );
    blocks
}

fn with_port(c: &Cmd, port: &str) -> Vec<String> {
    let mut a = c.args.clone();
    let takes_port = matches!(a.first().map(String::as_str), Some("pingpong" | "perf"));
    if takes_port && !a.iter().any(|w| w == "-p" || w == "--port") {
        a.extend(["-p".to_string(), port.to_string()]);
    }
    a
}

fn command(c: &Cmd, port: &str) -> Command {
    let mut p = Command::new(env!("CARGO_BIN_EXE_rverbs"));
    p.args(with_port(c, port))
        .envs(c.env.iter().map(|(k, v)| (k, v)))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    p
}

/// Waits for `child` at most `limit`, killing it then; its output and whether it
/// succeeded in time.
fn finish(mut child: Child, limit: Duration) -> (bool, String) {
    let start = Instant::now();
    let ok = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.success();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let o = child.wait_with_output().unwrap();
    (ok, common::output_text(&o))
}

/// Runs one block's commands, pairing servers and clients.
fn run_block(cmds: &[Cmd]) {
    let mut server: Option<(Cmd, Child)> = None;
    let mut port = String::new();
    let end_server = |s: Option<(Cmd, Child)>| {
        if let Some((c, child)) = s {
            let (ok, text) = finish(child, Duration::from_secs(30));
            assert!(
                ok,
                "{}: server `rverbs {}` failed:\n{text}",
                c.at,
                c.args.join(" ")
            );
        }
    };
    for c in cmds {
        if c.server {
            end_server(server.take());
            port = common::free_port_s();
            server = Some((c.clone(), command(c, &port).spawn().unwrap()));
            continue;
        }
        if !port.is_empty() && server.is_none() {
            port.clear();
        }
        if port.is_empty() {
            port = common::free_port_s();
        }
        // A client may start before its server listens: rverbs pingpong then says
        // "Couldn't connect" at once (perf retries by itself).
        let deadline = Instant::now() + Duration::from_secs(10);
        let (ok, text) = loop {
            // Generous: a debug build's size sweep (`perf ... -a`) on a loaded machine.
            let (ok, text) = finish(command(c, &port).spawn().unwrap(), Duration::from_secs(180));
            if !ok && text.contains("Couldn't connect") && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            break (ok, text);
        };
        assert!(
            ok,
            "{}: `rverbs {}` failed:\n{text}",
            c.at,
            c.args.join(" ")
        );
        end_server(server.take());
    }
    end_server(server.take());
}

fn documents() -> Vec<(String, String)> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut files = vec![format!("{root}/README.md")];
    let mut docs: Vec<String> = std::fs::read_dir(format!("{root}/docs"))
        .expect("docs/")
        .map(|e| e.unwrap().path().display().to_string())
        .filter(|p| p.ends_with(".md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            let name = f.strip_prefix(root).unwrap_or(&f).trim_start_matches('/');
            (name.to_string(), text)
        })
        .collect()
}

#[test]
fn every_tested_command_of_the_docs_runs_as_written() {
    let mut n = 0;
    for (name, text) in documents() {
        for block in tested_blocks(&name, &text) {
            n += block.len();
            run_block(&block);
        }
    }
    // The README's own blocks and the tool pages' are there (a marker lost in an edit
    // would silently test nothing).
    assert!(n >= 15, "only {n} tested commands found");
}

#[test]
fn blocks_are_parsed_as_the_module_docs_say() {
    let md = "text\n```text tested\n$ rverbs pingpong rc -c   # server\n$ X=1 rverbs pingpong rc \
              localhost -c\n  output\n```\n```sh\n$ rverbs never\n```\n```\n$ rverbs nor\n```\n";
    let b = tested_blocks("t.md", md);
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(b[0].len(), 2);
    assert!(b[0][0].server && !b[0][1].server);
    assert_eq!(b[0][1].env, vec![("X".to_string(), "1".to_string())]);
    assert_eq!(b[0][1].args, ["pingpong", "rc", "localhost", "-c"]);
    assert_eq!(
        with_port(&b[0][1], "4242")[4..],
        ["-p".to_string(), "4242".to_string()]
    );
    let gids = Cmd {
        at: String::new(),
        env: Vec::new(),
        args: vec!["gids".into()],
        server: false,
    };
    assert_eq!(with_port(&gids, "4242"), ["gids"]);
}

/// Every fenced block of the README and `docs/` is closed, and a closing fence is alone
/// on its line (text after it broke the README's rendering once); the README stays an
/// overview.
#[test]
fn fences_are_well_formed_and_the_readme_short() {
    for (name, text) in documents() {
        let mut open = false;
        for (i, line) in text.lines().enumerate() {
            let Some(info) = line.trim_start().strip_prefix("```") else {
                continue;
            };
            if open {
                assert!(
                    info.trim().is_empty(),
                    "{name}:{}: text after a closing fence: {line}",
                    i + 1
                );
            }
            open = !open;
        }
        assert!(!open, "{name}: a fenced block is not closed");
        if name == "README.md" {
            let n = text.lines().count();
            assert!(n <= 140, "README.md has {n} lines: move the depth to docs/");
        }
    }
}
