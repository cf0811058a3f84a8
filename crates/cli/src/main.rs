//! `rverbs`: the command-line tool of the rverbs RDMA stack.
#![forbid(unsafe_code)]

mod args;

use args::{Cli, Command, FlowCommand, MadCommand, PcapCommand, MAX_SIZE};
use clap::Parser;
use rverbs_cli::mad;
use std::process::ExitCode;

fn fail(tool: &str, e: &str) -> ExitCode {
    eprintln!("rverbs {tool}: {e}");
    ExitCode::from(1)
}

fn done(tool: &str, r: Result<(), String>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(tool, &e),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = rverbs_cli::perf::check_env() {
        eprintln!("rverbs: {e}");
        return ExitCode::from(2);
    }
    match cli.command {
        Command::Exec { cmd } => {
            let e = rverbs_cli::exec::exec(&cmd);
            eprintln!("rverbs exec: {e}");
            ExitCode::from(2)
        }
        Command::Demo { iters, size } => {
            let mut out = std::io::stdout();
            match rverbs_cli::demo::run(&mut out, iters, size) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("rverbs demo: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Pingpong {
            transport,
            server,
            port,
            dev,
            ib_port,
            size,
            mtu,
            rx_depth,
            iters,
            sl: _,
            events,
            gid_idx,
            check,
            stats,
            reply_from_wc,
            hop_limit,
            tclass,
            ack_timeout,
            linger,
        } => {
            if ib_port != 1 {
                eprintln!("rverbs pingpong: the soft device has one port (1)");
                return ExitCode::from(1);
            }
            let qp_type = match transport.as_str() {
                "uc" => rverbs::QpType::Uc,
                "ud" => rverbs::QpType::Ud,
                _ => rverbs::QpType::Rc,
            };
            let o = rverbs_cli::pingpong::Opts {
                qp_type,
                server,
                port,
                dev,
                size: size.unwrap_or(rverbs_cli::pingpong::default_size(qp_type)),
                mtu,
                rx_depth: rx_depth.max(2),
                iters,
                events,
                gid_idx,
                check,
                stats,
                reply_from_wc,
                hop_limit,
                traffic_class: tclass,
                ack_timeout,
                linger: std::time::Duration::from_secs_f64(linger.max(0.0)),
            };
            if reply_from_wc && qp_type != rverbs::QpType::Ud {
                eprintln!("rverbs pingpong: --reply-from-wc is for ud");
                return ExitCode::from(1);
            }
            let mut out = std::io::stdout();
            match rverbs_cli::pingpong::run(&o, &mut out) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Rping {
            server,
            client,
            addr,
            source,
            port,
            count,
            size,
            verbose,
            validate,
            debug,
            dev,
            timeout,
            stats,
        } => {
            if server == client {
                eprintln!("rverbs rping: give -s (server) or -c (client)");
                return ExitCode::from(2);
            }
            let o = rverbs_cli::rping::Opts {
                server,
                addr,
                source,
                port,
                count,
                size,
                verbose,
                validate,
                debug,
                dev,
                timeout: std::time::Duration::from_secs_f64(timeout.clamp(0.1, 86400.0)),
                ctx: None,
                stats,
            };
            let mut out = std::io::stdout();
            match rverbs_cli::rping::run(&o, &mut out) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("rverbs rping: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Ucmatose {
            server,
            bind,
            connections,
            count,
            size,
            port,
            dev,
            timeout,
        } => {
            let o = rverbs_cli::ucmatose::Opts {
                server_addr: server,
                bind,
                connections: connections as usize,
                count: count as usize,
                size: size as usize,
                port,
                dev,
                ctx: None,
                timeout: std::time::Duration::from_secs_f64(timeout.clamp(0.1, 86400.0)),
            };
            let mut out = std::io::stdout();
            match rverbs_cli::ucmatose::run(&o, &mut out) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Udaddy {
            server,
            bind,
            connections,
            count,
            size,
            port,
            dev,
            timeout,
        } => {
            let o = rverbs_cli::udaddy::Opts {
                server_addr: server,
                bind,
                connections: connections as usize,
                count: count as usize,
                size: size as usize,
                port,
                dev,
                ctx: None,
                timeout: std::time::Duration::from_secs_f64(timeout.clamp(0.1, 86400.0)),
            };
            let mut out = std::io::stdout();
            match rverbs_cli::udaddy::run(&o, &mut out) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Perf {
            op,
            kind,
            server,
            port,
            dev,
            size,
            all,
            iters,
            duration,
            depth,
            post_list,
            cq_mod,
            bidirectional,
            inline_size,
            mtu,
            gid_idx,
            spin_us,
            atomic_type,
            qps,
            connection,
            perftest,
            rdma_cm,
            ack_timeout,
            retry_count,
            json,
        } => {
            use rverbs_cli::perf::{Kind, Op};
            let kind = if kind == "lat" { Kind::Lat } else { Kind::Bw };
            let op_v = Op::from_name(&op).unwrap_or(Op::Send);
            let o = rverbs_cli::perf::Opts {
                op: op_v,
                kind,
                server,
                port,
                dev,
                size: size.unwrap_or(if kind == Kind::Bw { 65536 } else { 2 }),
                size_given: size.is_some(),
                all,
                iters: iters.unwrap_or(
                    match (
                        perftest || rdma_cm,
                        rverbs_cli::perf::perftest::Tool::of(op_v, kind),
                    ) {
                        // perftest's own default -n for that tool.
                        (true, Some(t)) => t.default_iters(),
                        _ if kind == Kind::Bw => 5000,
                        _ => 1000,
                    },
                ),
                duration: duration.filter(|d| *d > 0.0),
                depth,
                post_list,
                cq_mod: cq_mod.map(|n| n as usize),
                bidir: bidirectional,
                inline_size: inline_size as usize,
                mtu,
                gid_idx,
                spin: std::time::Duration::from_micros(spin_us),
                cmp_swap: atomic_type == "CMP_AND_SWAP",
                qps: qps as usize,
                transport: match connection.as_str() {
                    "UC" => rverbs::QpType::Uc,
                    "UD" => rverbs::QpType::Ud,
                    _ => rverbs::QpType::Rc,
                },
                perftest: perftest || rdma_cm,
                rdma_cm,
                ack_timeout,
                retry_count,
                json,
            };
            // Each QP has its own buffers of the largest size (perftest's -q).
            let largest = if o.all { 8 << 20 } else { o.size };
            if largest.saturating_mul(o.qps) > MAX_SIZE {
                return fail(
                    "perf",
                    &format!(
                        "-q {} QPs of {largest} bytes each exceed {MAX_SIZE} bytes of buffers",
                        o.qps
                    ),
                );
            }
            let mut out = std::io::stdout();
            match rverbs_cli::perf::run(&o, &mut out) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("rverbs perf: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Devinfo {
            dev,
            ib_port,
            list,
            verbose,
            json,
        } => {
            let r = if list {
                rverbs_cli::devinfo::list()
            } else {
                rverbs_cli::devinfo::run_port(dev.as_deref(), ib_port, verbose, json)
            };
            match r {
                Ok(t) => {
                    print!("{t}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("rverbs devinfo: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Gids { sysfs, json } => {
            let rows = match &sysfs {
                Some(root) => rverbs_cli::gids::sysfs_rows(&rverbs::sysfs::SysfsReader::new(root)),
                None => rverbs_cli::gids::soft_rows(),
            };
            let rows = match rows {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("rverbs gids: {e}");
                    return ExitCode::from(1);
                }
            };
            let mut out = std::io::stdout().lock();
            let r = if json {
                rverbs_cli::gids::print_json(&rows, &mut out)
            } else {
                rverbs_cli::gids::print_table(&rows, &mut out)
            };
            match r {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("rverbs gids: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Flow {
            command:
                FlowCommand::Check {
                    rule,
                    qp_type,
                    no_cap_net_raw,
                },
        } => {
            let o = rverbs_cli::flow::CheckOpts {
                rule: rule.join(" "),
                qp_type: match qp_type.as_str() {
                    "raw" => rverbs_flow::FlowQpType::RawPacket,
                    "ud" => rverbs_flow::FlowQpType::Ud,
                    _ => rverbs_flow::FlowQpType::Other,
                },
                cap_net_raw: !no_cap_net_raw,
            };
            match rverbs_cli::flow::check(&o, &mut std::io::stdout()) {
                Ok(0) => ExitCode::SUCCESS,
                Ok(errno) => ExitCode::from(errno.clamp(1, 255) as u8),
                Err(e) => {
                    eprintln!("rverbs flow check: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::InteropPeer {
            server,
            port,
            dev,
            gid_idx,
            iters,
            stats,
            ack_timeout,
        } => {
            let o = rverbs_cli::interop::Opts {
                server,
                port,
                dev,
                gid_idx,
                iters,
                stats,
                ack_timeout,
            };
            let mut out = std::io::stdout();
            match rverbs_cli::interop::run(&o, &mut out) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("rverbs interop-peer: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Perfquery {
            dev,
            port,
            extended,
            reset_only,
            reset_after,
            gid,
        } => {
            let gid = match gid.as_deref().map(parse_gid).transpose() {
                Ok(g) => g,
                Err(e) => return fail("perfquery", &e),
            };
            let o = mad::PerfOpts {
                dev,
                port,
                extended,
                reset_only,
                reset_after,
                gid,
            };
            done("perfquery", mad::perfquery(&o, &mut std::io::stdout()))
        }
        Command::Smpquery {
            what,
            dev,
            port,
            mkey,
        } => {
            let q = match what.as_str() {
                "nodeinfo" => mad::SmpQuery::NodeInfo,
                "nodedesc" => mad::SmpQuery::NodeDesc,
                "portinfo" => mad::SmpQuery::PortInfo,
                "guids" => mad::SmpQuery::Guids,
                _ => mad::SmpQuery::Pkeys,
            };
            let r = mad::parse_num(&mkey)
                .and_then(|k| mad::smpquery(dev.as_deref(), port, q, k, &mut std::io::stdout()));
            done("smpquery", r)
        }
        Command::Mad {
            command:
                MadCommand::ListenTraps {
                    dev,
                    count,
                    timeout,
                },
        } => {
            let t = timeout.map(|s| std::time::Duration::from_secs_f64(s.max(0.0)));
            let r = mad::listen_traps(dev.as_deref(), count, t, &mut std::io::stdout());
            done("mad listen-traps", r)
        }
        Command::Mad {
            command: MadCommand::Serve { dev, bkey, mkey },
        } => {
            let r = mad::parse_num(&bkey).and_then(|b| {
                let m = mad::parse_num(&mkey)?;
                mad::serve(dev.as_deref(), b, m, &mut std::io::stdout())
            });
            done("mad serve", r)
        }
        Command::Mad {
            command:
                MadCommand::BmSet {
                    gid,
                    bkey,
                    new_bkey,
                    trap_dest,
                    dev,
                },
        } => {
            let r = (|| {
                let g = parse_gid(&gid)?;
                let key = mad::parse_num(&bkey)?;
                let what = match (new_bkey, trap_dest) {
                    (Some(k), None) => mad::BmSet::BKey(mad::parse_num(&k)?),
                    (None, Some(t)) => mad::BmSet::TrapDest(parse_gid(&t)?),
                    _ => return Err("give --new-bkey or --trap-dest".to_string()),
                };
                mad::bm_set(dev.as_deref(), g, key, what, &mut std::io::stdout())
            })();
            done("mad bm-set", r)
        }
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

/// A GID argument (any form `Gid`'s `FromStr` reads), with the text in the error.
fn parse_gid(s: &str) -> Result<rverbs::Gid, String> {
    s.parse().map_err(|e| format!("bad GID {s:?}: {e}"))
}
