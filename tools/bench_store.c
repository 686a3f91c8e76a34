/*
 * bench_store.c - `kvstash bench store` (placeholder until the store lands).
 */
#include <stdio.h>

#include "cmd.h"

int kvs_bench_store(int argc, char **argv)
{
	fprintf(stderr, "kvstash bench store: not built yet\n");
	return 1;
}
