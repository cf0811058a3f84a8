//! `rverbs flow check`: reads a flow rule in the text form of [`rverbs_flow::text`],
//! applies the checks `ibv_create_flow` makes (the kernel's and an mlx5 NIC's) and prints
//! the rule as understood plus the bytes the kernel's uverbs command would carry.

use rverbs_flow::attr::{validate, FlowContext, FlowQpType};
use rverbs_flow::text::{parse_rule, rule_to_string};
use rverbs_flow::uverbs::encode_flow_attr;
use std::io::Write;

/// Options of `rverbs flow check`.
#[derive(Debug, Clone)]
pub struct CheckOpts {
    /// The rule, in text form.
    pub rule: String,
    /// Type of the QP the flow would attach to.
    pub qp_type: FlowQpType,
    /// Whether to check as a caller with CAP_NET_RAW.
    pub cap_net_raw: bool,
}

/// Checks `o.rule` and writes the result to `out`: `ok <rule>` and the uverbs bytes as
/// hex (`ib_uverbs_flow_attr` + specs), or `<ERRNO> (<n>): <reason>`. Returns the errno
/// (0 when the rule is valid).
pub fn check(o: &CheckOpts, out: &mut impl Write) -> std::io::Result<i32> {
    let attr = match parse_rule(&o.rule) {
        Ok(a) => a,
        Err(e) => {
            writeln!(out, "{e}")?;
            return Ok(e.errno());
        }
    };
    let ctx = FlowContext {
        qp_type: o.qp_type,
        cap_net_raw: o.cap_net_raw,
        num_ports: 1,
    };
    if let Err(e) = validate(&attr, &ctx) {
        writeln!(out, "{e}")?;
        return Ok(e.errno());
    }
    writeln!(out, "ok {}", rule_to_string(&attr))?;
    let bytes = encode_flow_attr(&attr);
    for chunk in bytes.chunks(16) {
        let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        writeln!(out, "  {}", hex.join(" "))?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(rule: &str, qp_type: FlowQpType, cap: bool) -> (i32, String) {
        let mut out = Vec::new();
        let o = CheckOpts {
            rule: rule.into(),
            qp_type,
            cap_net_raw: cap,
        };
        let e = check(&o, &mut out).unwrap();
        (e, String::from_utf8(out).unwrap())
    }

    #[test]
    fn valid_rule_prints_the_kernel_bytes() {
        let (e, out) = run("prio 1 udp dport 4791", FlowQpType::RawPacket, true);
        assert_eq!(e, 0);
        #[cfg(target_endian = "little")]
        assert_eq!(
            out,
            "ok normal prio 1 udp dport 4791\n  00 00 00 00 10 00 01 00 01 00 00 01 00 00 00 00\n  41 00 00 00 10 00 00 00 12 b7 00 00 ff ff 00 00\n"
        );
    }

    #[test]
    fn errors_carry_the_errno() {
        assert_eq!(run("udp", FlowQpType::Other, true).0, 22);
        assert_eq!(run("udp", FlowQpType::Ud, false).0, 1);
        assert_eq!(run("ipv4 proto 0x0/0x0 ipv6", FlowQpType::Ud, true).0, 22);
        assert_eq!(run("prio 16 udp", FlowQpType::RawPacket, true).0, 12);
        let (e, out) = run("esp spi 1 tcp", FlowQpType::RawPacket, true);
        assert_eq!(e, 22, "{out}");
        let (e, out) = run("nonsense", FlowQpType::RawPacket, true);
        assert_eq!((e, out.starts_with("EINVAL (22)")), (22, true), "{out}");
    }
}
