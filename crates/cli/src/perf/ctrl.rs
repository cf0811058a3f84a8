//! The out-of-band control channel of `rverbs perf`: one TCP connection carrying
//! text lines `verb key=value key=value ...`. Lines come from the peer, so the parser
//! takes any bytes and answers with an error, never a panic (fuzzed: `perf_ctrl`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// The longest line accepted from the peer.
pub const MAX_LINE: usize = 4096;

/// One control message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    /// The first word.
    pub verb: String,
    /// `key=value` pairs in order.
    pub fields: Vec<(String, String)>,
}

impl Msg {
    /// A message with no fields yet.
    pub fn new(verb: &str) -> Msg {
        Msg {
            verb: verb.to_string(),
            fields: Vec::new(),
        }
    }

    /// Adds a field (the value must not contain spaces or newlines).
    pub fn with(mut self, k: &str, v: impl std::fmt::Display) -> Msg {
        self.fields.push((k.to_string(), v.to_string()));
        self
    }

    /// The line, without its newline.
    pub fn render(&self) -> String {
        let mut s = self.verb.clone();
        for (k, v) in &self.fields {
            s.push(' ');
            s.push_str(k);
            s.push('=');
            s.push_str(v);
        }
        s
    }

    /// Parses one line (without newline).
    pub fn parse(line: &str) -> Result<Msg, String> {
        if line.len() > MAX_LINE {
            return Err("control line too long".into());
        }
        let mut words = line.split(' ').filter(|w| !w.is_empty());
        let verb = words.next().ok_or("empty control line")?;
        if !verb.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("bad control verb {verb:?}"));
        }
        let mut fields = Vec::new();
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| format!("control field {w:?} is not key=value"))?;
            if k.is_empty() {
                return Err(format!("control field {w:?} has no key"));
            }
            fields.push((k.to_string(), v.to_string()));
        }
        Ok(Msg {
            verb: verb.to_string(),
            fields,
        })
    }

    /// Checks the verb.
    pub fn expect(self, verb: &str) -> Result<Msg, String> {
        if self.verb == verb {
            Ok(self)
        } else if self.verb == "error" {
            Err(format!(
                "peer: {}",
                self.str("why").unwrap_or("(no reason)")
            ))
        } else {
            Err(format!(
                "expected {verb:?} from the peer, got {:?}",
                self.verb
            ))
        }
    }

    /// A field's text.
    pub fn str(&self, k: &str) -> Result<&str, String> {
        self.fields
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| format!("peer's {:?} has no {k}", self.verb))
    }

    /// A decimal unsigned field.
    pub fn u64(&self, k: &str) -> Result<u64, String> {
        self.str(k)?
            .parse()
            .map_err(|_| format!("peer's {k} is not a number"))
    }

    /// A hexadecimal unsigned field.
    pub fn hex(&self, k: &str) -> Result<u64, String> {
        u64::from_str_radix(self.str(k)?, 16).map_err(|_| format!("peer's {k} is not hex"))
    }

    /// A finite non-negative float field.
    pub fn f64(&self, k: &str) -> Result<f64, String> {
        self.str(k)?
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| format!("peer's {k} is not a finite non-negative number"))
    }

    /// A 16-byte GID as 32 hex digits ([`rverbs::Gid::hex`]).
    pub fn gid(&self, k: &str) -> Result<rverbs::Gid, String> {
        rverbs::Gid::from_hex(self.str(k)?).map_err(|_| format!("peer's {k} is not 32 hex digits"))
    }
}

/// Reads one line (at most [`MAX_LINE`] bytes) and parses it.
pub fn read_msg<R: BufRead>(r: &mut R) -> Result<Msg, String> {
    let mut line = Vec::new();
    let n = r
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', &mut line)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
                "control connection: the peer sent nothing for {} s",
                super::handshake_timeout().as_secs_f64()
            ),
            _ => format!("control connection: {e}"),
        })?;
    if n == 0 {
        return Err("the peer closed the control connection".into());
    }
    if line.last() != Some(&b'\n') {
        return Err("control line too long or cut short".into());
    }
    line.pop();
    let text = std::str::from_utf8(&line).map_err(|_| "control line is not UTF-8")?;
    Msg::parse(text)
}

/// The control connection: a line writer and a buffered reader.
pub struct Ctrl {
    /// Writes lines.
    pub w: TcpStream,
    /// Reads lines.
    pub r: BufReader<TcpStream>,
}

impl Ctrl {
    /// Wraps a connected stream.
    pub fn new(s: TcpStream) -> Result<Ctrl, String> {
        let _ = s.set_nodelay(true);
        let r = s.try_clone().map_err(|e| e.to_string())?;
        Ok(Ctrl {
            w: s,
            r: BufReader::new(r),
        })
    }

    /// Sends one message.
    pub fn send(&mut self, m: &Msg) -> Result<(), String> {
        send(&mut self.w, m)
    }

    /// Receives one message.
    pub fn recv(&mut self) -> Result<Msg, String> {
        read_msg(&mut self.r)
    }
}

/// Sends one message on `w`.
pub fn send(w: &mut impl Write, m: &Msg) -> Result<(), String> {
    let mut line = m.render();
    line.push('\n');
    w.write_all(line.as_bytes())
        .map_err(|e| format!("control connection: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let m = Msg::new("hello")
            .with("qpn", "1a")
            .with("size", 64)
            .with("gid", rverbs::Gid([7; 16]).hex().to_string());
        let p = Msg::parse(&m.render()).unwrap();
        assert_eq!(p, m);
        assert_eq!(p.hex("qpn").unwrap(), 0x1a);
        assert_eq!(p.u64("size").unwrap(), 64);
        assert_eq!(p.gid("gid").unwrap(), rverbs::Gid([7; 16]));
    }

    #[test]
    fn bad_lines_are_errors() {
        for bad in ["", "   ", "he/llo", "hello x", "hello =1"] {
            assert!(Msg::parse(bad).is_err(), "{bad:?}");
        }
        let m = Msg::parse("run size=x gid=zz f=inf").unwrap();
        assert!(m.u64("size").is_err());
        assert!(m.u64("iters").unwrap_err().contains("no iters"));
        assert!(m.gid("gid").is_err());
        assert!(m.f64("f").is_err());
        assert!(m.clone().expect("hello").is_err());
        let e = Msg::parse("error why=mismatch").unwrap().expect("hello");
        assert_eq!(e.unwrap_err(), "peer: mismatch");
        let long = vec![b'a'; MAX_LINE + 10];
        assert!(read_msg(&mut &long[..]).is_err());
        assert!(read_msg(&mut &b"cut"[..]).is_err());
        assert!(read_msg(&mut &b""[..]).unwrap_err().contains("closed"));
        assert!(read_msg(&mut &b"\xff\n"[..]).is_err());
        assert_eq!(read_msg(&mut &b"ok a=1\n"[..]).unwrap().u64("a"), Ok(1));
    }
}
