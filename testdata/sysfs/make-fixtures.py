#!/usr/bin/env python3
"""Builds the sysfs fixture trees under testdata/sysfs/ (class/infiniband layout).

rxe-vm1/  from the rxe peer's reference dump (rxe-peer/reference/gid-table.txt, the
          "raw sysfs reads" section: kernel 6.1 rxe on eth0), slots 0..15 of the 1024;
          empty slots have a zero GID, and their type/ndev reads fail with EINVAL,
          written as <file>.errno (see crates/rverbs/src/sysfs.rs).
old-kernel/, ib-port/, roce-v1v2/, bad/  synthetic trees for the rules rdma-core
          applies (seed 000: missing gid_attrs, IB link layer, "IB/RoCE v1" text,
          unknown type text, unreadable type, unparsable GID, unknown link layer).

usage: make-fixtures.py [REFERENCE]   (default ../../../shared/rxe-peer/reference/gid-table.txt)
"""
import os, re, shutil, sys

HERE = os.path.dirname(os.path.abspath(__file__))
EINVAL = 22
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"


def put(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text + "\n")


def port(tree, dev, p, link_layer, entries, slots=16, attrs=True):
    """entries: {index: (gid, type-or-None, ndev-or-None)}; None = read fails EINVAL."""
    base = os.path.join(HERE, tree, dev, "ports", str(p))
    put(os.path.join(base, "link_layer"), link_layer)
    for i in range(slots):
        gid, ty, nd = entries.get(i, (ZERO, None, None))
        put(os.path.join(base, "gids", str(i)), gid)
        if not attrs:
            continue
        for sub, val in (("types", ty), ("ndevs", nd)):
            f = os.path.join(base, "gid_attrs", sub, str(i))
            if val is None:
                put(f + ".errno", str(EINVAL))
            elif val != "MISSING":
                put(f, val)
            else:
                os.makedirs(os.path.dirname(f), exist_ok=True)


def main():
    ref = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        HERE, "../../../shared/rxe-peer/reference/gid-table.txt")
    text = open(ref).read()
    for t in ("rxe-vm1", "old-kernel", "ib-port", "roce-v1v2", "bad"):
        shutil.rmtree(os.path.join(HERE, t), ignore_errors=True)
    entries = {}
    for m in re.finditer(r"^gids/(\d+): (\S+)$", text, re.M):
        i = int(m.group(1))
        ty = re.search(rf"^gid_attrs/types/{i}: (.*)$", text, re.M).group(1)
        nd = re.search(rf"^gid_attrs/ndevs/{i}: (.*)$", text, re.M).group(1)
        bad = lambda v: "read error" in v
        entries[i] = (m.group(2), None if bad(ty) else ty, None if bad(nd) else nd)
    ll = re.search(r"^link_layer: (\S+)", text, re.M).group(1)
    port("rxe-vm1", "rxe0", 1, ll, entries)
    g = "fe80:0000:0000:0000:0202:c9ff:fe00:0001"
    port("old-kernel", "mlx4_0", 1, "Ethernet", {0: (g, None, None)}, slots=2, attrs=False)
    port("ib-port", "mlx5_0", 1, "InfiniBand", {0: (g, None, None)}, slots=2)
    port("roce-v1v2", "mlx5_1", 1, "Ethernet",
         {0: (g, "IB/RoCE v1", "eth0"), 1: (g, "RoCE v2", "eth0")}, slots=4)
    port("bad", "bad0", 1, "Ethernet-ish",
         {0: (g, "RoCE v3", "eth0"), 1: (g, "MISSING", "eth0"), 2: ("not-a-gid", "RoCE v2", "eth0"),
          3: (g, "IB/RoCE v1", "eth0")}, slots=4)


main()
