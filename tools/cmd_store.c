/*
 * cmd_store.c - `kvstash store` (placeholder until the store engine lands).
 */
#include <stdio.h>

#include "cmd.h"

int kvs_cmd_store(int argc, char **argv)
{
	fprintf(stderr, "kvstash store: not built yet\n");
	return 1;
}
