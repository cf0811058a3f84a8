//! `rverbs`: the command-line tool of the rverbs RDMA stack.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "rverbs",
    version,
    about = "RDMA verbs tools for the rverbs stack"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Work with packet captures.
    Pcap {
        #[command(subcommand)]
        command: PcapCommand,
    },
}

#[derive(Subcommand)]
enum PcapCommand {
    /// Print one line per RoCE v2 (UDP port 4791) packet of a pcap or pcapng capture,
    /// then the totals.
    ///
    /// Line: `<index> <src-ip>:<port> > <dst-ip>:4791 <OPCODE> qpn=0x<hex> psn=<n>
    /// [ackreq] [se] [pad=<n>] [reth ...] [aeth ...] [deth ...] [imm=0x<hex>]
    /// [atomic ...] payload=<n> icrc=<ok|bad>`; a record that cannot be decoded prints
    /// `<index> malformed: <reason>`. Totals: `packets` counts every record, `roce` the
    /// well-formed RoCE v2 packets (icrc_ok + icrc_bad), `malformed` the undecodable
    /// ones. Link types: Ethernet, raw IP, IPv4, IPv6, Linux cooked (v1, v2), BSD
    /// loopback. Exits non-zero when the file is not a capture, is cut short, or is
    /// corrupt (after printing what it could decode).
    Decode {
        /// The capture file.
        file: std::path::PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Pcap {
            command: PcapCommand::Decode { file },
        } => {
            let input = match std::fs::File::open(&file) {
                Ok(f) => std::io::BufReader::new(f),
                Err(e) => {
                    eprintln!("rverbs pcap decode: {}: {e}", file.display());
                    return ExitCode::from(2);
                }
            };
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            match rverbs_cli::pcap::decode(input, &mut out) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    drop(out);
                    eprintln!("rverbs pcap decode: {}: {e}", file.display());
                    ExitCode::from(1)
                }
            }
        }
    }
}
