//! The steering table: installed flows and the lookup that decides which QPs receive a
//! frame.
//!
//! # Semantics (`ibv_create_flow(3)`, mlx5 `fs.c`)
//!
//! * NORMAL rules are tried in priority order (lower number first). Within one priority,
//!   DONT_TRAP rules come before trapping ones (mlx5 puts them in flow table `2p`, the
//!   others in `2p + 1`); remaining ties go to the rule created first (a NIC leaves
//!   overlapping rules of one priority unspecified).
//! * The first matching rule receives the frame. If it has DONT_TRAP the frame goes on to
//!   the next matching rule, and so on until a rule without DONT_TRAP took it.
//! * A frame no trapping rule took goes to every MC_DEFAULT rule if its destination MAC
//!   is multicast, and to every ALL_DEFAULT rule.
//! * Every SNIFFER rule gets a copy of every frame, received and sent, before steering.
//! * Actions apply to the rule's copy: DROP discards it (and ends steering, like a
//!   trapping rule), TAG puts the tag in the completion, COUNT counts packets and bytes.
//! * EGRESS rules match frames being sent; DROP there stops the frame, COUNT counts it.
//!
//! # Lookup
//!
//! Tuple space search (the scheme of Open vSwitch's classifier, and in effect of mlx5's
//! auto-grouped flow tables): rules with the same mask form a group; a group hashes the
//! masked fields of its rules, so a lookup costs one hash probe per distinct mask instead
//! of a compare per rule. Groups are visited in the order of their best rule and the walk
//! stops as soon as no remaining group can beat the trapping match already found.
//! [`Classifier::classify_linear`] is the same decision by scanning every rule, the
//! baseline of the benchmark and the oracle of the tests.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::Ipv4Addr;

use crate::attr::{Counters, FlowAttr, FlowAttrType, FlowFlags, FlowSpec, Layer, MplsFilter};
use crate::error::FlowError;
use crate::fields::*;

/// Handle of an installed flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowId(u64);

impl FlowId {
    /// A handle numbered by a device other than the classifier (a system device's
    /// rule: the kernel's handle).
    pub fn from_raw(raw: u64) -> FlowId {
        FlowId(raw)
    }

    /// The raw value (slot and generation), for listings.
    pub fn raw(self) -> u64 {
        self.0
    }
    fn slot(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
    }
}

/// Which way a frame is going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Received from the wire: NORMAL / default / sniffer rules.
    Ingress,
    /// Being sent: EGRESS rules and sniffers.
    Egress,
}

/// One QP receiving a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// The QP the flow is attached to.
    pub qpn: u32,
    /// Flow tag for the completion (TAG action).
    pub tag: Option<u32>,
    /// The flow that steered it.
    pub flow: FlowId,
}

/// What steering decided for one frame.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// QPs that receive a copy (sniffers first, then steered rules in order, then
    /// defaults). Empty on egress except for sniffers.
    pub deliveries: Vec<Delivery>,
    /// Steering ended in a DROP (ingress: nothing after it received the frame; egress:
    /// the frame must not be sent).
    pub dropped: bool,
}

impl Verdict {
    /// Empties the verdict for reuse.
    pub fn clear(&mut self) {
        self.deliveries.clear();
        self.dropped = false;
    }
}

/// A summary of one installed flow (for listings).
#[derive(Debug, Clone)]
pub struct FlowInfo {
    /// Its handle.
    pub id: FlowId,
    /// The QP it steers to.
    pub qpn: u32,
    /// The attribute it was created from.
    pub attr: FlowAttr,
}

/// FxHash-style mixing of masked words (the key is already a hash, see `IdHasher`).
fn mix(h: u64, w: u64) -> u64 {
    (h.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95)
}

/// Hashes the buckets' `u64` keys as they are: they are already well mixed.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix(self.0, u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Groups with at most this many rules are scanned rather than hashed.
const SMALL_GROUP: usize = 4;

type Buckets = HashMap<u64, Vec<u32>, BuildHasherDefault<IdHasher>>;

struct Rule {
    id: FlowId,
    qpn: u32,
    attr: FlowAttr,
    /// Sort key: priority, then DONT_TRAP first, then creation order. Lower wins.
    order: u64,
    traps: bool,
    drop: bool,
    tag: Option<u32>,
    counters: Option<Counters>,
    mask: [u64; FV_WORDS],
    val: [u64; FV_WORDS],
}

impl Rule {
    fn matches(&self, words: &[usize], fv: &[u64; FV_WORDS]) -> bool {
        words.iter().all(|&i| fv[i] & self.mask[i] == self.val[i])
    }
}

struct Group {
    mask: [u64; FV_WORDS],
    /// Words where the mask is non-zero.
    words: Vec<usize>,
    buckets: Buckets,
    /// Every rule of the group, sorted by `order`: small groups are scanned instead of
    /// hashed (cheaper than a hash and a probe for a handful of rules).
    members: Vec<u32>,
    count: usize,
    /// Best (lowest) `order` among the group's rules.
    min_order: u64,
}

impl Group {
    fn key(&self, fv: &[u64; FV_WORDS]) -> u64 {
        self.words
            .iter()
            .fold(0, |h, &i| mix(h, fv[i] & self.mask[i]))
    }
}

#[derive(Default)]
struct Table {
    /// Sorted by `min_order`.
    groups: Vec<Group>,
    /// Every rule, sorted by `order` (the linear baseline).
    sorted: Vec<u32>,
}

/// The flows of one device port: NORMAL rules per direction, defaults and sniffers.
#[derive(Default)]
pub struct Classifier {
    rules: Vec<Option<Rule>>,
    generations: Vec<u32>,
    free: Vec<u32>,
    seq: u64,
    ingress: Table,
    egress: Table,
    all_default: Vec<u32>,
    mc_default: Vec<u32>,
    sniffers: Vec<u32>,
}

impl std::fmt::Debug for Classifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Classifier")
            .field("flows", &self.len())
            .field("ingress_groups", &self.ingress.groups.len())
            .field("egress_groups", &self.egress.groups.len())
            .finish()
    }
}

/// The mask and the value a flow compiles to, filled one field at a time.
#[derive(Default)]
struct Compiled {
    m: FieldVector,
    v: FieldVector,
}

impl Compiled {
    /// Writes `val`/`mask` bytes at `off`; a mask bit already set with a different value
    /// is a contradiction (mlx5 `set_proto` returns EINVAL for it).
    fn put(&mut self, off: usize, val: &[u8], mask: &[u8], what: &str) -> Result<(), FlowError> {
        let (mb, vb) = (self.m.bytes_mut(), self.v.bytes_mut());
        for i in 0..val.len() {
            let (nm, nv) = (mask[i], val[i] & mask[i]);
            let common = mb[off + i] & nm;
            if vb[off + i] & common != nv & common {
                return Err(FlowError::inval(format!(
                    "{what} contradicts another spec of the flow"
                )));
            }
            mb[off + i] |= nm;
            vb[off + i] |= nv;
        }
        Ok(())
    }

    /// [`Compiled::put`] of one field of a spec, read alike from its value and its mask.
    fn field<F, const N: usize>(
        &mut self,
        off: usize,
        l: &Layer<F>,
        get: impl Fn(&F) -> [u8; N],
        what: &str,
    ) -> Result<(), FlowError> {
        self.put(off, &get(&l.val), &get(&l.mask), what)
    }

    fn require(&mut self, off: usize, bit: u8) {
        self.m.bytes_mut()[off] |= bit;
        self.v.bytes_mut()[off] |= bit;
    }

    /// The source and destination address of an IPv4 or IPv4_EXT spec.
    fn ipv4<F>(
        &mut self,
        block: usize,
        l: &Layer<F>,
        get: impl Fn(&F) -> (Ipv4Addr, Ipv4Addr),
    ) -> Result<(), FlowError> {
        self.require(block + PRESENT, P_IPV4);
        self.field(block + SIP, l, |h| ip16(get(h).0.octets()), "src_ip")?;
        self.field(block + DIP, l, |h| ip16(get(h).1.octets()), "dst_ip")
    }
}

fn ip16(a: [u8; 4]) -> [u8; 16] {
    let mut o = [0; 16];
    o[..4].copy_from_slice(&a);
    o
}

/// Compiles a flow's header specs into one mask and one value over the field layout.
pub fn compile(attr: &FlowAttr) -> Result<(FieldVector, FieldVector), FlowError> {
    let mut c = Compiled::default();
    let mut prev = 0u32;
    for spec in &attr.specs {
        // Inner headers exist only behind a tunnel: the parser fills the inner block only
        // then, so each inner spec's own presence bit or protocol byte is enough.
        let block = if spec.is_inner() { INNER } else { OUTER };
        match spec {
            FlowSpec::Eth(l) => {
                if l.inner {
                    c.require(INNER + PRESENT, P_L2);
                }
                c.field(block + DMAC, l, |h| h.dst_mac, "dst_mac")?;
                c.field(block + SMAC, l, |h| h.src_mac, "src_mac")?;
                c.field(
                    block + ETHERTYPE,
                    l,
                    |h| h.ether_type.to_be_bytes(),
                    "ether_type",
                )?;
                if l.mask.vlan_tag != 0 {
                    // mlx5 sets cvlan_tag: a VLAN match needs a tagged frame.
                    c.require(block + PRESENT, P_VLAN);
                    c.field(block + VLAN, l, |h| h.vlan_tag.to_be_bytes(), "vlan_tag")?;
                }
            }
            FlowSpec::Ipv4(l) => c.ipv4(block, l, |h| (h.src_ip, h.dst_ip))?,
            FlowSpec::Ipv4Ext(l) => {
                c.ipv4(block, l, |h| (h.src_ip, h.dst_ip))?;
                c.field(block + PROTO, l, |h| [h.proto], "proto")?;
                c.field(block + TOS, l, |h| [h.tos], "tos")?;
            }
            FlowSpec::Ipv6(l) => {
                c.require(block + PRESENT, P_IPV6);
                c.field(block + SIP, l, |h| h.src_ip.octets(), "src_ip")?;
                c.field(block + DIP, l, |h| h.dst_ip.octets(), "dst_ip")?;
                c.field(
                    block + FLOW_LABEL,
                    l,
                    |h| h.flow_label.to_be_bytes(),
                    "flow_label",
                )?;
                c.field(block + PROTO, l, |h| [h.next_hdr], "next_hdr")?;
                c.field(block + TOS, l, |h| [h.traffic_class], "traffic_class")?;
            }
            FlowSpec::Tcp(l) | FlowSpec::Udp(l) => {
                let proto = if matches!(spec, FlowSpec::Tcp(_)) {
                    6
                } else {
                    17
                };
                c.put(block + PROTO, &[proto], &[0xff], spec.name())?;
                if l.mask.src_port != 0 || l.mask.dst_port != 0 {
                    c.require(block + PRESENT, P_PORTS);
                }
                c.field(block + SPORT, l, |h| h.src_port.to_be_bytes(), "src_port")?;
                c.field(block + DPORT, l, |h| h.dst_port.to_be_bytes(), "dst_port")?;
            }
            FlowSpec::VxlanTunnel(l) => {
                c.require(MISC_PRESENT, M_VXLAN);
                c.field(VNI, l, |h| h.tunnel_id.to_be_bytes(), "tunnel_id")?;
            }
            FlowSpec::Gre(l) => {
                c.put(OUTER + PROTO, &[47], &[0xff], "gre")?;
                c.require(MISC_PRESENT, M_GRE);
                c.field(GRE_PROTO, l, |h| h.protocol.to_be_bytes(), "gre protocol")?;
                if l.mask.key != 0 {
                    c.require(MISC_PRESENT, M_GRE_KEY);
                    c.field(GRE_KEY, l, |h| h.key.to_be_bytes(), "gre key")?;
                }
            }
            FlowSpec::Mpls(l) => {
                let (slot, bit) = mpls_slot(prev, l);
                c.require(MISC_PRESENT, bit);
                c.field(slot, l, |h| h.label.to_be_bytes(), "mpls")?;
            }
            FlowSpec::Esp(l) => {
                c.put(block + PROTO, &[50], &[0xff], "esp")?;
                c.require(MISC_PRESENT, M_ESP);
                c.field(ESP_SPI, l, |h| h.spi.to_be_bytes(), "spi")?;
            }
            FlowSpec::Tag(_) | FlowSpec::Drop | FlowSpec::Count(_) | FlowSpec::ActionHandle(_) => {}
        }
        prev = spec.type_code();
    }
    Ok((c.m, c.v))
}

/// Where an MPLS spec matches, from the spec before it (mlx5 `parse_flow_attr`: after UDP
/// → MPLS-in-UDP, after GRE → MPLS-in-GRE, else the first label after the (inner)
/// Ethernet header).
fn mpls_slot(prev: u32, l: &Layer<MplsFilter>) -> (usize, u8) {
    use crate::attr::spec_type;
    match prev & !spec_type::INNER {
        spec_type::UDP => (MPLS_UDP, M_MPLS_UDP),
        spec_type::GRE => (MPLS_GRE, M_MPLS_GRE),
        _ if l.inner => (MPLS_INNER, M_MPLS_INNER),
        _ => (MPLS_ETH, M_MPLS_ETH),
    }
}

fn words_of(fv: &FieldVector) -> [u64; FV_WORDS] {
    fv.words()
}

impl Classifier {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of installed flows.
    pub fn len(&self) -> usize {
        self.rules.iter().filter(|r| r.is_some()).count()
    }

    /// Whether no flow is installed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Distinct masks among ingress NORMAL rules (the number of hash probes a lookup may
    /// need).
    pub fn ingress_groups(&self) -> usize {
        self.ingress.groups.len()
    }

    /// Installs `attr` for QP `qpn`. The attribute should have passed
    /// [`crate::attr::validate`]; this only fails on specs that contradict each other.
    pub fn insert(&mut self, qpn: u32, attr: &FlowAttr) -> Result<FlowId, FlowError> {
        let (m, v) = compile(attr)?;
        let traps = !attr.flags.contains(FlowFlags::DONT_TRAP);
        let seq = self.seq;
        self.seq += 1;
        let order =
            (u64::from(attr.priority) << 48) | (u64::from(traps) << 47) | (seq & ((1 << 47) - 1));
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.rules.push(None);
                self.generations.push(0);
                (self.rules.len() - 1) as u32
            }
        };
        let generation = self.generations[slot as usize];
        let id = FlowId((u64::from(generation) << 32) | u64::from(slot));
        let rule = Rule {
            id,
            qpn,
            attr: attr.clone(),
            order,
            traps,
            drop: attr.drops(),
            tag: attr.tag(),
            counters: attr.counters().cloned(),
            mask: words_of(&m),
            val: words_of(&v),
        };
        let (attr_type, egress) = (attr.attr_type, attr.flags.contains(FlowFlags::EGRESS));
        let mask = rule.mask;
        self.rules[slot as usize] = Some(rule);
        match attr_type {
            FlowAttrType::Sniffer => self.sniffers.push(slot),
            FlowAttrType::AllDefault => self.all_default.push(slot),
            FlowAttrType::McDefault => self.mc_default.push(slot),
            FlowAttrType::Normal => {
                let table = if egress {
                    &mut self.egress
                } else {
                    &mut self.ingress
                };
                Self::table_insert(&self.rules, table, slot, &mask, order);
            }
        }
        Ok(id)
    }

    fn table_insert(
        rules: &[Option<Rule>],
        table: &mut Table,
        slot: u32,
        mask: &[u64; FV_WORDS],
        order: u64,
    ) {
        let ord = |s: &u32| rules[*s as usize].as_ref().map_or(u64::MAX, |r| r.order);
        let pos = table.sorted.partition_point(|s| ord(s) < order);
        table.sorted.insert(pos, slot);
        let gi = match table.groups.iter().position(|g| &g.mask == mask) {
            Some(i) => i,
            None => {
                table.groups.push(Group {
                    mask: *mask,
                    words: (0..FV_WORDS).filter(|&i| mask[i] != 0).collect(),
                    buckets: Buckets::default(),
                    members: Vec::new(),
                    count: 0,
                    min_order: u64::MAX,
                });
                table.groups.len() - 1
            }
        };
        let g = &mut table.groups[gi];
        let val = rules[slot as usize]
            .as_ref()
            .map(|r| r.val)
            .unwrap_or([0; FV_WORDS]);
        let key = g.key(&val);
        let bucket = g.buckets.entry(key).or_default();
        let pos = bucket.partition_point(|s| ord(s) < order);
        bucket.insert(pos, slot);
        let pos = g.members.partition_point(|s| ord(s) < order);
        g.members.insert(pos, slot);
        g.count += 1;
        g.min_order = g.min_order.min(order);
        table.groups.sort_by_key(|g| g.min_order);
    }

    /// Removes a flow (`ibv_destroy_flow`). Returns false for an unknown or already
    /// removed id (the verb's EINVAL). The flow steers nothing from the moment this returns.
    pub fn remove(&mut self, id: FlowId) -> bool {
        let slot = id.slot();
        let Some(Some(rule)) = self.rules.get(slot) else {
            return false;
        };
        if rule.id != id {
            return false;
        }
        let slot32 = slot as u32;
        let (attr_type, egress, mask, val) = (
            rule.attr.attr_type,
            rule.attr.flags.contains(FlowFlags::EGRESS),
            rule.mask,
            rule.val,
        );
        match attr_type {
            FlowAttrType::Sniffer => self.sniffers.retain(|&s| s != slot32),
            FlowAttrType::AllDefault => self.all_default.retain(|&s| s != slot32),
            FlowAttrType::McDefault => self.mc_default.retain(|&s| s != slot32),
            FlowAttrType::Normal => {
                let table = if egress {
                    &mut self.egress
                } else {
                    &mut self.ingress
                };
                table.sorted.retain(|&s| s != slot32);
                if let Some(gi) = table.groups.iter().position(|g| g.mask == mask) {
                    let g = &mut table.groups[gi];
                    let key = g.key(&val);
                    if let Some(b) = g.buckets.get_mut(&key) {
                        b.retain(|&s| s != slot32);
                        if b.is_empty() {
                            g.buckets.remove(&key);
                        }
                    }
                    g.members.retain(|&s| s != slot32);
                    g.count -= 1;
                    if g.count == 0 {
                        table.groups.remove(gi);
                    } else {
                        let rules = &self.rules;
                        g.min_order = g
                            .members
                            .first()
                            .and_then(|&s| rules[s as usize].as_ref())
                            .map_or(u64::MAX, |r| r.order);
                        table.groups.sort_by_key(|g| g.min_order);
                    }
                }
            }
        }
        self.rules[slot] = None;
        self.generations[slot] = self.generations[slot].wrapping_add(1);
        self.free.push(slot32);
        true
    }

    /// Removes every flow of QP `qpn` (the QP is being destroyed). Returns how many.
    pub fn remove_qp(&mut self, qpn: u32) -> usize {
        let ids: Vec<FlowId> = self
            .rules
            .iter()
            .flatten()
            .filter(|r| r.qpn == qpn)
            .map(|r| r.id)
            .collect();
        ids.into_iter().filter(|&id| self.remove(id)).count()
    }

    /// Every installed flow, in creation-slot order.
    pub fn flows(&self) -> Vec<FlowInfo> {
        self.rules
            .iter()
            .flatten()
            .map(|r| FlowInfo {
                id: r.id,
                qpn: r.qpn,
                attr: r.attr.clone(),
            })
            .collect()
    }

    /// Parses `frame` and decides where it goes (tuple-space lookup), applying COUNT
    /// actions. A frame shorter than an Ethernet header is an error (count it as a drop).
    pub fn classify(
        &self,
        frame: &[u8],
        dir: Direction,
        out: &mut Verdict,
    ) -> Result<(), FrameError> {
        let fv = FieldVector::parse(frame)?;
        self.classify_fields(&fv, frame.len(), dir, out);
        Ok(())
    }

    /// [`Classifier::classify`] on already parsed fields of a `len`-byte frame.
    pub fn classify_fields(&self, fv: &FieldVector, len: usize, dir: Direction, out: &mut Verdict) {
        let words = fv.words();
        let mut hits = [0u32; 16];
        let n = self.lookup(&words, dir, &mut hits);
        self.finish(fv, len, dir, &hits[..n], true, out);
    }

    /// The same decision as [`Classifier::classify_fields`] by testing every rule in
    /// order: the baseline the tuple-space lookup is measured and checked against. It
    /// only decides: COUNT actions are not applied.
    pub fn classify_linear(&self, fv: &FieldVector, len: usize, dir: Direction, out: &mut Verdict) {
        let words = fv.words();
        let table = self.table(dir);
        let mut hits = [0u32; 16];
        let mut n = 0;
        for &s in &table.sorted {
            let Some(r) = self.rules[s as usize].as_ref() else {
                continue;
            };
            if (0..FV_WORDS).all(|i| words[i] & r.mask[i] == r.val[i]) {
                if n < hits.len() {
                    hits[n] = s;
                    n += 1;
                }
                if r.traps || r.drop || n == hits.len() {
                    break;
                }
            }
        }
        self.finish(fv, len, dir, &hits[..n], false, out);
    }

    fn table(&self, dir: Direction) -> &Table {
        match dir {
            Direction::Ingress => &self.ingress,
            Direction::Egress => &self.egress,
        }
    }

    /// Fills `hits` with the matched NORMAL rules in order, ending at the first one that
    /// traps (or drops). Returns how many. At most `hits.len()` DONT_TRAP rules are
    /// followed (16; a longer chain is cut there).
    fn lookup(&self, fv: &[u64; FV_WORDS], dir: Direction, hits: &mut [u32; 16]) -> usize {
        let table = self.table(dir);
        let mut bound = u64::MAX;
        let mut n = 0;
        // Candidates are collected unsorted across groups, then ordered.
        let mut cand: [(u64, u32); 16] = [(0, 0); 16];
        for g in &table.groups {
            if g.min_order >= bound {
                break;
            }
            let list: &[u32] = if g.members.len() <= SMALL_GROUP {
                &g.members
            } else {
                match g.buckets.get(&g.key(fv)) {
                    Some(b) => b,
                    None => continue,
                }
            };
            for &s in list {
                let Some(r) = self.rules[s as usize].as_ref() else {
                    continue;
                };
                if r.order >= bound {
                    break;
                }
                if !r.matches(&g.words, fv) {
                    continue; // not this rule (small group) or a hash collision
                }
                if r.traps || r.drop {
                    bound = r.order;
                }
                if n < cand.len() {
                    cand[n] = (r.order, s);
                    n += 1;
                } else if let Some(worst) = cand.iter_mut().max_by_key(|c| c.0) {
                    if r.order < worst.0 {
                        *worst = (r.order, s);
                    }
                }
                if r.traps || r.drop {
                    break;
                }
            }
        }
        let cand = &mut cand[..n];
        cand.sort_unstable_by_key(|c| c.0);
        let mut k = 0;
        for &(order, s) in cand.iter() {
            if order > bound {
                break;
            }
            hits[k] = s;
            k += 1;
        }
        k
    }

    fn finish(
        &self,
        fv: &FieldVector,
        len: usize,
        dir: Direction,
        hits: &[u32],
        count: bool,
        out: &mut Verdict,
    ) {
        out.clear();
        let deliver = |r: &Rule, out: &mut Verdict| {
            if let (Some(c), true) = (&r.counters, count) {
                c.add(len);
            }
            if r.drop {
                return;
            }
            out.deliveries.push(Delivery {
                qpn: r.qpn,
                tag: r.tag,
                flow: r.id,
            });
        };
        for &s in &self.sniffers {
            if let Some(r) = self.rules[s as usize].as_ref() {
                deliver(r, out);
            }
        }
        let mut trapped = false;
        for &s in hits {
            let Some(r) = self.rules[s as usize].as_ref() else {
                continue;
            };
            if dir == Direction::Egress {
                // Egress rules count and may drop; the QP only named the device.
                if let (Some(c), true) = (&r.counters, count) {
                    c.add(len);
                }
            } else {
                deliver(r, out);
            }
            if r.drop {
                out.dropped = true;
                trapped = true;
                break;
            }
            if r.traps {
                trapped = true;
                break;
            }
        }
        if trapped || dir == Direction::Egress {
            return;
        }
        if fv.is_multicast() {
            for &s in &self.mc_default {
                if let Some(r) = self.rules[s as usize].as_ref() {
                    deliver(r, out);
                }
            }
        }
        for &s in &self.all_default {
            if let Some(r) = self.rules[s as usize].as_ref() {
                deliver(r, out);
            }
        }
    }
}
