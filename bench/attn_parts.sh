#!/bin/bash
# attn_parts.sh - the fast attention tile taken apart, on the GPU machine.
#
# Builds the parts probe library (bench/libkvstash_attn_parts.so, the
# kernels compiled with bench/attn_probe.cuh) once per parts mask
# (KVS_ATTN_PARTS: 1 compute only, 2 no Key MMAs, 4 no Value update, 8 no
# Key B operand, 16 no Value origin sums, 32 copy only, 64 code operands on
# the FMA pipe, 128 the copies never waited for, 256 the copies with a
# source size of 0 (nothing read), 512 every tile from one page, so from
# L2) in build-parts-<mask>/, then times each with bench/attn_bench.py,
# mask 0 (the real kernel) first and last, and prints one line per mask
# and shape.  Results of masks other than 0 are wrong on
# purpose: the times say what each part costs.  Then, per shape, each
# mask's time against the kernel's.  Run from the project root after
# `source <devdeps>/install.sh`.
#
# usage: bench/attn_parts.sh [shapes [masks...]]
#        default: 8x32768,1x32768,32x8192 and 1 32 3 5 9 17 65 2 4 8 6 64
set -o pipefail
shapes=${1:-8x32768,1x32768,32x8192}
shift
masks=${*:-1 32 3 5 9 17 65 2 4 8 6 64}
jobs_max=$(( $(nproc) / 3 ))
[ "$jobs_max" -ge 1 ] || jobs_max=1

for m in 0 $masks; do
	(
		meson setup "build-parts-$m" -Dcuda=enabled -Dtests=disabled \
			-Dfuzz=disabled "-Dcuda_args=-DKVS_ATTN_PARTS=$m" \
			>/dev/null 2>&1 &&
			ninja -C "build-parts-$m" -j3 \
				bench/libkvstash_attn_parts.so \
				>/dev/null 2>&1 ||
			echo "attn_parts: mask $m did not build" >&2
	) &
	while [ "$(jobs -r | wc -l)" -ge "$jobs_max" ]; do
		sleep 1
	done
done
wait

lines=$(mktemp)
trap 'rm -f "$lines"' EXIT
echo "mask shape kvstash_us sdpa_us ratio bw_share"
for m in 0 $masks 0; do
	lib="build-parts-$m/bench/libkvstash_attn_parts.so"
	[ -f "$lib" ] || continue
	diag=--diag
	[ "$m" = 0 ] && diag=
	python3 bench/attn_bench.py --lib "$lib" --no-seal $diag --runs 30 \
		--shapes "$shapes" 2>&1 |
		grep -E '^[0-9]+x[0-9]+ ' | sed "s/^/$m /" | tee -a "$lines"
done
# per shape: each mask's median time against the kernel's (mask 0, the
# mean of its two passes)
echo
echo "shape mask us vs_kernel"
awk '$1 == 0 { k[$2] += $3; nk[$2]++ }
     { t[$2 " " $1] = $3; if (!(($2 " " $1) in seen)) {
	       seen[$2 " " $1] = 1; order[++n] = $2 " " $1 } }
     END { for (i = 1; i <= n; i++) {
		   split(order[i], a, " ")
		   base = k[a[1]] / nk[a[1]]
		   v = a[2] == 0 ? base : t[order[i]]
		   printf "%s %s %.1f %+.1f%%\n", a[1], a[2], v,
			  100 * (v / base - 1) } }' "$lines" | sort -s -k1,1
