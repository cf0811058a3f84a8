#!/bin/sh
# Regenerates libibverbs.symbols and imports.txt from the installed Debian packages
# (libibverbs1, ibverbs-utils, perftest). Run from this directory; review the diff:
# a removed or re-versioned line is an ABI break the map must not follow.
set -eu
LIB=${LIB:-/usr/lib/x86_64-linux-gnu/libibverbs.so.1}
{
	echo "# Dynamic symbols exported by $(basename "$LIB") (readelf --dyn-syms -W, readelf -V),"
	echo "# from Debian 12's libibverbs1 (rdma-core 44). Regenerate with refresh.sh."
	echo "# node NAME [PARENT]: a version definition and the node it inherits from."
	echo "# TYPE NAME@@NODE: the default version of NAME; TYPE NAME@NODE: a compatibility version."
	readelf -V -W "$LIB" | awk '
		/^Version definition section/ { d = 1; next }
		/^Version needs section/ { d = 0 }
		d && /Name:/ && !/Flags: BASE/ { if (n) print line; n = $NF; line = "node " n }
		d && /Parent 1:/ { line = line " " $NF }
		END { if (n) print line }'
	readelf --dyn-syms -W "$LIB" | awk 'NR > 3 && $7 != "UND" && $7 != "ABS" && $8 ~ /@/ { print $4, $8 }' | sort -k2
} > libibverbs.symbols
{
	echo "# Versioned libibverbs symbols that Debian 12's tools import (readelf --dyn-syms -W),"
	echo "# one line per tool and symbol. Regenerate with refresh.sh."
	for t in /usr/bin/ibv_* /usr/bin/ib_read_* /usr/bin/ib_write_* /usr/bin/ib_send_* /usr/bin/ib_atomic_*; do
		[ -x "$t" ] || continue
		readelf --dyn-syms -W "$t" | awk -v t="$(basename "$t")" \
			'NR > 3 && $7 == "UND" && $8 ~ /@IBVERBS_/ { sub(/ \([0-9]+\)$/, "", $8); print t, $8 }' | sort -u
	done
} > imports.txt
# librdmacm.so.1 (the same functions are in rverbs' libibverbs.so.1, see
# crates/libibverbs/src/rdmacm): Debian's symbols, and what rdmacm-utils, perftest and
# pyverbs (its modules bind every import at load time) import.
RDMACM=${RDMACM:-/usr/lib/x86_64-linux-gnu/librdmacm.so.1}
{
	echo "# Dynamic symbols exported by $(basename "$RDMACM") (readelf --dyn-syms -W, readelf -V),"
	echo "# from Debian 12's librdmacm1 (rdma-core 44). Regenerate with refresh.sh."
	echo "# node NAME [PARENT]: a version definition and the node it inherits from."
	echo "# TYPE NAME@@NODE: the default version of NAME; TYPE NAME@NODE: a compatibility version."
	readelf -V -W "$RDMACM" | awk '
		/^Version definition section/ { d = 1; next }
		/^Version needs section/ { d = 0 }
		d && /Name:/ && !/Flags: BASE/ { if (n) print line; n = $NF; line = "node " n }
		d && /Parent 1:/ { line = line " " $NF }
		END { if (n) print line }'
	readelf --dyn-syms -W "$RDMACM" | awk 'NR > 3 && $7 != "UND" && $7 != "ABS" && $8 ~ /@/ { print $4, $8 }' | sort -k2
} > librdmacm.symbols
{
	echo "# Versioned librdmacm symbols that Debian 12's tools import (readelf --dyn-syms -W),"
	echo "# one line per tool and symbol. Regenerate with refresh.sh."
	for t in /usr/bin/rping /usr/bin/udaddy /usr/bin/ucmatose /usr/bin/rdma_server /usr/bin/rdma_client \
		/usr/bin/ib_read_* /usr/bin/ib_write_* /usr/bin/ib_send_* /usr/bin/ib_atomic_* \
		/usr/lib/python3/dist-packages/pyverbs/*.so; do
		[ -f "$t" ] || continue
		readelf --dyn-syms -W "$t" | awk -v t="$(basename "$t")" \
			'NR > 3 && $7 == "UND" && $8 ~ /@RDMACM_/ { sub(/ \([0-9]+\)$/, "", $8); print t, $8 }' | sort -u
	done
} > librdmacm-imports.txt
