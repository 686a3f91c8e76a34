/*
 * cmd_remote.c - `kvstash --server HOST:PORT --auth-key-file FILE
 * put|get|exists|stat|delete ...`: the `kvstash store` forms, served by a
 * kvstashd through libkvstash (include/kvstash/client.h); and the same
 * against a cluster: `kvstash --etcd URL --cluster NAME ...`, or several
 * servers (`--server A,B` or `--server A --server B`) placed the same
 * way (docs/CLUSTER.md).
 *
 * Arguments and output follow `kvstash store` where they overlap: put
 * prints one id per block, in order (with --durable only once the block
 * is durable on the server); get ID --out FILE exits 3 on a miss; stat
 * --json has store stat's fields, with the daemon's counters (summed
 * over a cluster's members, beside a "nodes" array).  A refused
 * authentication exits 1 with one line that says so.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli_kvs.h"
#include "cli_util.h"
#include "cmd.h"
#include "kvstash/client.h"

static const char remote_usage[] =
	"usage: kvstash --server HOST:PORT[,HOST:PORT...] --auth-key-file "
	"FILE\n"
	"       kvstash --etcd http://HOST:PORT[,...] --cluster NAME "
	"--auth-key-file FILE\n"
	"               [--timeout-ms N] [--node-timeout-ms N] [--replicas N]\n"
	"               [--repair-replicas] [--shared-memory]\n"
	"               put [--durable] BLOCK...\n"
	"               get ID --out FILE\n"
	"               exists ID...\n"
	"               delete ID...\n"
	"               stat [--json]\n"
	"\n"
	"ID: 64 hex digits of the span id, ':' and the layer, as put prints.\n"
	"put prints one id per block, in order; with --durable an id is\n"
	"printed only once its block is durable on the server.  get, exists\n"
	"and delete exit 3 when an id is not found.  The key file holds\n"
	"'TENANT HEXKEY' or 'HEXKEY' (tenant \"default\").\n"
	"\n"
	"A cluster (--etcd, or --server given a list or repeated) places each\n"
	"block on --replicas members (1) by rendezvous hashing; reads ask\n"
	"that many in rank order, then fall back; a member that does not\n"
	"answer within --node-timeout-ms (2000) is skipped for a while.\n"
	"--repair-replicas writes a block read back to the members that\n"
	"missed it.  stat lists the members under \"nodes\".\n";

struct remote_args {
	const char *server, *key_file, *out, *etcd, *cluster;
	uint32_t timeout_ms, node_timeout_ms, replicas;
	bool durable, json, shared_memory, repair;
	bool many; /* a cluster client */
};

static int connect_cluster(const char *cmd, const struct remote_args *a,
			   struct kvs_client **out)
{
	struct kvs_client_cluster_opts o;
	int err;

	kvs_client_cluster_opts_default(&o);
	o.etcd = a->etcd;
	o.cluster = a->cluster;
	o.servers = a->etcd ? NULL : a->server;
	o.key_file = a->key_file;
	o.shared_memory = a->shared_memory;
	o.repair_replicas = a->repair;
	if (a->replicas)
		o.replicas = a->replicas;
	if (a->timeout_ms)
		o.timeout_ms = a->timeout_ms;
	if (a->node_timeout_ms)
		o.node_timeout_ms = a->node_timeout_ms;
	err = kvs_client_connect_cluster(&o, out);
	if (err)
		kvs_cli_error(cmd, "%s: %s", a->etcd ? a->etcd : a->server,
			      kvs_strerror(err));
	return err;
}

static int connect_to(const char *cmd, const struct remote_args *a,
		      struct kvs_client **out)
{
	if (a->many)
		return connect_cluster(cmd, a, out);
	return kvs_cli_client_connect(cmd, a->server, a->key_file,
				      a->timeout_ms, a->shared_memory, out);
}

/* Parses ids[0 .. n) as keys; 0 or a usage error (printed). */
static int parse_keys(const char *cmd, char **ids, size_t n,
		      struct kvs_store_key *keys)
{
	for (size_t i = 0; i < n; i++)
		if (kvs_store_key_parse(ids[i], &keys[i])) {
			kvs_cli_error(cmd,
				      "'%s' is not an id (64 hex digits, ':' "
				      "and the layer)",
				      ids[i]);
			return -KVS_EPARAM;
		}
	return 0;
}

static int remote_put(struct kvs_client *c, const struct remote_args *a,
		      char **pos, size_t n_pos)
{
	struct kvs_client_limits lim;
	enum kvs_durability dur =
		a->durable ? KVS_DURABILITY_DURABLE : KVS_DURABILITY_WRITTEN;
	int err = 0;

	kvs_client_limits(c, &lim);
	for (size_t at = 0; at < n_pos && !err;) {
		size_t n = 0, bytes = 0, max = lim.max_batch;
		uint8_t **objs = calloc(max, sizeof(*objs));
		size_t *lens = calloc(max, sizeof(*lens));
		int *res = calloc(max, sizeof(*res));

		if (!objs || !lens || !res)
			err = -ENOMEM;
		/* a batch within the server's item and payload limits */
		while (!err && at + n < n_pos && n < max) {
			err = kvs_cli_read_file("put", pos[at + n], &objs[n],
						&lens[n]);
			if (err)
				break;
			if (n && bytes + lens[n] > lim.max_payload) {
				free(objs[n]);
				objs[n] = NULL;
				break;
			}
			bytes += lens[n++];
		}
		if (n) {
			int rc = a->replicas
					 ? kvs_client_put_replicas(
						   c,
						   (const uint8_t *const *)objs,
						   lens, n, dur, a->replicas,
						   res)
					 : kvs_client_put(
						   c,
						   (const uint8_t *const *)objs,
						   lens, n, dur, res);

			for (size_t i = 0; i < n; i++) {
				struct kvs_store_key key;
				char text[KVS_STORE_KEY_TEXT];
				int r = rc ? rc : res[i];

				if (r) {
					kvs_cli_error("put", "%s: %s",
						      pos[at + i],
						      kvs_strerror(r));
					err = r;
					break;
				}
				kvs_store_key_of(objs[i], lens[i], &key);
				kvs_store_key_format(&key, text);
				printf("%s\n", text);
			}
			fflush(stdout);
		}
		for (size_t i = 0; objs && i < max; i++)
			free(objs[i]);
		free(objs);
		free(lens);
		free(res);
		at += n;
	}
	return err ? KVS_EXIT_FAIL : KVS_EXIT_OK;
}

static int remote_get(struct kvs_client *c, const struct remote_args *a,
		      char **pos, size_t n_pos)
{
	struct kvs_client_limits lim;
	struct kvs_store_key key;
	size_t cap, len = 0;
	void *buf;
	int result, err, rc;

	if (parse_keys("get", pos, 1, &key))
		return KVS_EXIT_USAGE;
	kvs_client_limits(c, &lim);
	cap = lim.max_object;
	buf = malloc(cap);
	if (!buf)
		return KVS_EXIT_FAIL;
	err = kvs_client_get(c, &key, 1, &buf, &cap, &len, &result);
	if (!err)
		err = result;
	if (err == -KVS_ENOTFOUND) {
		kvs_cli_error("get", "%s: not found", pos[0]);
		rc = KVS_EXIT_NOTFOUND;
	} else if (err) {
		kvs_cli_error("get", "%s: %s", pos[0], kvs_strerror(err));
		rc = KVS_EXIT_FAIL;
	} else {
		rc = kvs_cli_write_file("get", a->out, buf, len) ? KVS_EXIT_FAIL
								 : KVS_EXIT_OK;
	}
	free(buf);
	return rc;
}

/* exists and delete: one line per id; 3 if any was not found. */
static int remote_keys(struct kvs_client *c, const char *cmd, char **pos,
		       size_t n_pos)
{
	struct kvs_client_limits lim;
	struct kvs_store_key *keys = calloc(n_pos, sizeof(*keys));
	bool *present = calloc(n_pos, sizeof(*present));
	int *res = calloc(n_pos, sizeof(*res));
	int rc = KVS_EXIT_OK, err = 0;

	kvs_client_limits(c, &lim);
	if (!keys || !present || !res) {
		rc = KVS_EXIT_FAIL;
		goto out;
	}
	if (parse_keys(cmd, pos, n_pos, keys)) {
		rc = KVS_EXIT_USAGE;
		goto out;
	}
	for (size_t at = 0; at < n_pos && !err; at += lim.max_batch) {
		size_t n =
			n_pos - at < lim.max_batch ? n_pos - at : lim.max_batch;

		if (strcmp(cmd, "exists") == 0)
			err = kvs_client_exists(c, keys + at, n, present + at);
		else
			err = kvs_client_delete(c, keys + at, n, res + at);
	}
	if (err) {
		kvs_cli_error(cmd, "%s", kvs_strerror(err));
		rc = KVS_EXIT_FAIL;
		goto out;
	}
	for (size_t i = 0; i < n_pos; i++) {
		bool found = strcmp(cmd, "exists") == 0 ? present[i] : !res[i];

		if (strcmp(cmd, "delete") == 0 && res[i] &&
		    res[i] != -KVS_ENOTFOUND) {
			kvs_cli_error(cmd, "%s: %s", pos[i],
				      kvs_strerror(res[i]));
			rc = KVS_EXIT_FAIL;
			continue;
		}
		printf("%s %s\n", pos[i],
		       strcmp(cmd, "exists") == 0
			       ? (found ? "present" : "absent")
			       : (found ? "deleted" : "not found"));
		if (!found && rc == KVS_EXIT_OK)
			rc = KVS_EXIT_NOTFOUND;
	}
out:
	free(keys);
	free(present);
	free(res);
	return rc;
}

/* A cluster's members: one object each in "nodes", or a line each. */
static void nodes_out(struct kvs_cli_json *j, const struct kvs_client_node *n,
		      size_t count)
{
	if (j)
		kvs_cli_json_array_begin(j, "nodes");
	for (size_t i = 0; i < count; i++) {
		const struct kvs_store_stats *st = &n[i].stat.store;
		/* the tier holding more: with write-through (durability
		 * written or durable) the NVMe tier holds every block */
		bool nvme = st->nvme.blocks > st->dram.blocks;
		uint64_t blocks = nvme ? st->nvme.blocks : st->dram.blocks;
		uint64_t bytes = nvme ? st->nvme.bytes : st->dram.bytes;

		if (!j) {
			printf("node %s %s: %s", n[i].id, n[i].address,
			       n[i].status ? "down" : "up");
			if (n[i].status)
				printf(" (%s)", kvs_strerror(n[i].status));
			else
				printf(", %" PRIu64 " blocks, %" PRIu64
				       " bytes",
				       blocks, bytes);
			printf(", capacity %" PRIu64 "%s\n", n[i].capacity,
			       n[i].marked_down ? ", skipped for now" : "");
			continue;
		}
		kvs_cli_json_object_begin(j, NULL);
		kvs_cli_json_str(j, "id", n[i].id);
		kvs_cli_json_str(j, "address", n[i].address);
		kvs_cli_json_str(j, "state", n[i].status ? "down" : "up");
		kvs_cli_json_u64(j, "blocks", blocks);
		kvs_cli_json_u64(j, "bytes", bytes);
		kvs_cli_json_u64(j, "capacity", n[i].capacity);
		kvs_cli_json_u64(j, "dram_blocks", st->dram.blocks);
		kvs_cli_json_u64(j, "nvme_blocks", st->nvme.blocks);
		kvs_cli_json_bool(j, "marked_down", n[i].marked_down);
		kvs_cli_json_str(j, "error",
				 n[i].status ? kvs_strerror(n[i].status)
					     : NULL);
		kvs_cli_json_object_end(j);
	}
	if (j)
		kvs_cli_json_array_end(j);
}

/* Where a cluster client's members come from. */
static void membership_out(struct kvs_cli_json *j, struct kvs_client *c)
{
	struct kvs_client_membership m;

	kvs_client_membership(c, &m);
	if (!j) {
		printf("members: %zu (%s%s), generation %" PRIu64 "\n",
		       m.members, m.etcd ? "etcd" : "fixed list",
		       m.reachable ? "" : ", etcd unreachable: the last seen",
		       m.generation);
		return;
	}
	kvs_cli_json_object_begin(j, "membership");
	kvs_cli_json_str(j, "source", m.etcd ? "etcd" : "list");
	kvs_cli_json_str(j, "state", m.reachable ? "connected" : "unreachable");
	kvs_cli_json_u64(j, "unreachable_ms", (uint64_t)m.unreachable_ms);
	kvs_cli_json_u64(j, "generation", m.generation);
	kvs_cli_json_u64(j, "members", m.members);
	kvs_cli_json_object_end(j);
}

/* stat of a cluster: the members' counters summed, and each member. */
static int cluster_stat(struct kvs_client *c, const struct remote_args *a)
{
	struct kvs_client_stat s = { 0 };
	struct kvs_client_node *nodes;
	struct kvs_cli_json j;
	size_t n, up = 0;
	int err = kvs_client_nodes(c, true, &nodes, &n);

	if (err) {
		kvs_cli_error("stat", "%s", kvs_strerror(err));
		return KVS_EXIT_FAIL;
	}
	/* the totals: what kvs_client_stat sums, from this one round */
	for (size_t i = 0; i < n; i++)
		up += nodes[i].status == 0;
	err = up ? kvs_client_stat(c, &s) : 0;
	if (!a->json) {
		membership_out(NULL, c);
		nodes_out(NULL, nodes, n);
		printf("totals over %zu answering: dram %" PRIu64
		       " blocks, %" PRIu64 " bytes; nvme %" PRIu64
		       " blocks, %" PRIu64 " bytes; hits %" PRIu64
		       ", misses %" PRIu64 "\n",
		       up, s.store.dram.blocks, s.store.dram.bytes,
		       s.store.nvme.blocks, s.store.nvme.bytes, s.store.hits,
		       s.store.misses);
	} else {
		kvs_cli_json_init(&j, stdout);
		kvs_cli_json_object_begin(&j, NULL);
		kvs_cli_store_stats_json(&j, &s.store, "daemon");
		kvs_cli_json_u64(&j, "tails", s.tails);
		kvs_cli_json_u64(&j, "tail_bytes", s.tail_bytes);
		kvs_cli_json_u64(&j, "tails_expired", s.tails_expired);
		kvs_cli_json_u64(&j, "connections", s.connections);
		kvs_cli_json_u64(&j, "uptime_s", s.uptime_s);
		membership_out(&j, c);
		nodes_out(&j, nodes, n);
		kvs_cli_json_object_end(&j);
		kvs_cli_json_finish(&j);
	}
	free(nodes);
	if (!up) {
		kvs_cli_error("stat", "no member answered");
		return KVS_EXIT_FAIL;
	}
	return err ? KVS_EXIT_FAIL : KVS_EXIT_OK;
}

static int remote_stat(struct kvs_client *c, const struct remote_args *a)
{
	struct kvs_client_stat s;
	struct kvs_store_stats *st = &s.store;
	struct kvs_cli_json j;
	int err;

	if (a->many)
		return cluster_stat(c, a);
	err = kvs_client_stat(c, &s);
	if (err) {
		kvs_cli_error("stat", "%s", kvs_strerror(err));
		return KVS_EXIT_FAIL;
	}
	if (!a->json) {
		printf("dram: %" PRIu64 " blocks, %" PRIu64 " bytes of %" PRIu64
		       "\nnvme: %" PRIu64 " blocks, %" PRIu64
		       " bytes in %" PRIu64 " segments (%" PRIu64
		       " file bytes), %s I/O\ncounters of the daemon (up "
		       "%" PRIu64 " s): hits: %" PRIu64 ", misses: %" PRIu64
		       ", evictions: %" PRIu64 ", spills: %" PRIu64
		       ", corrupt dropped: %" PRIu64 ", torn dropped: %" PRIu64
		       "\ntails: %" PRIu64 " (%" PRIu64 " bytes), %" PRIu64
		       " expired; connections: %" PRIu64 "\n",
		       st->dram.blocks, st->dram.bytes, st->dram.capacity,
		       st->nvme.blocks, st->nvme.bytes, st->segments,
		       st->nvme_file_bytes,
		       st->direct_io ? "O_DIRECT" : "buffered", s.uptime_s,
		       st->hits, st->misses, st->evictions, st->spills,
		       st->corrupt_dropped, st->torn_dropped, s.tails,
		       s.tail_bytes, s.tails_expired, s.connections);
		return KVS_EXIT_OK;
	}
	kvs_cli_json_init(&j, stdout);
	kvs_cli_json_object_begin(&j, NULL);
	/* the daemon's counters, since it started */
	kvs_cli_store_stats_json(&j, st, "daemon");
	kvs_cli_json_u64(&j, "tails", s.tails);
	kvs_cli_json_u64(&j, "tail_bytes", s.tail_bytes);
	kvs_cli_json_u64(&j, "tails_expired", s.tails_expired);
	kvs_cli_json_u64(&j, "connections", s.connections);
	kvs_cli_json_u64(&j, "uptime_s", s.uptime_s);
	kvs_cli_json_object_end(&j);
	kvs_cli_json_finish(&j);
	return KVS_EXIT_OK;
}

/* Which members: one server, a list of them, or etcd's.  0 or a usage
 * error (printed). */
static int check_members(struct remote_args *a)
{
	if (!a->server == !a->etcd) {
		kvs_cli_error("remote", a->server ? "--server or --etcd, not "
						    "both"
						  : "which server? (--server "
						    "or --etcd)");
		return -KVS_EPARAM;
	}
	if (!a->etcd != !a->cluster) {
		kvs_cli_error("remote", a->etcd ? "--etcd needs --cluster"
						: "--cluster needs --etcd");
		return -KVS_EPARAM;
	}
	a->many = a->etcd || strchr(a->server, ',');
	return 0;
}

int kvs_cmd_remote(int argc, char **argv)
{
	static const char *const subs[] = { "put", "get", "exists", "delete",
					    "stat" };
	struct remote_args a = { 0 };
	struct kvs_cli_opt opts[] = {
		KVS_OPT_STR("auth-key-file", &a.key_file, true),
		KVS_OPT_STR("etcd", &a.etcd, false),
		KVS_OPT_STR("cluster", &a.cluster, false),
		KVS_OPT_U32("timeout-ms", &a.timeout_ms, 1, 3600000, false),
		KVS_OPT_U32("node-timeout-ms", &a.node_timeout_ms, 1, 3600000,
			    false),
		KVS_OPT_U32("replicas", &a.replicas, 1, KVS_CLIENT_REPLICAS_MAX,
			    false),
		KVS_OPT_FLAG("repair-replicas", &a.repair),
		KVS_OPT_STR("out", &a.out, false),
		KVS_OPT_FLAG("durable", &a.durable),
		KVS_OPT_FLAG("json", &a.json),
		KVS_OPT_FLAG("shared-memory", &a.shared_memory),
	};
	const char **pos = calloc((size_t)argc + 1, sizeof(*pos));
	char **rest = calloc((size_t)argc + 1, sizeof(*rest));
	char *servers = NULL;
	const char *sub;
	struct kvs_client *c;
	size_t n_pos, need;
	int rc, n_rest;

	if (!pos || !rest) {
		free(pos);
		free(rest);
		return KVS_EXIT_FAIL;
	}
	rc = kvs_cli_take_repeated("remote", "server", argc, argv, rest,
				   &n_rest, &servers);
	if (!rc)
		rc = kvs_cli_parse("remote", n_rest, rest, opts,
				   sizeof(opts) / sizeof(opts[0]), pos,
				   (size_t)argc, &n_pos);
	a.server = servers;
	if (!rc)
		rc = check_members(&a);
	free(rest);
	if (rc) {
		free(pos);
		free(servers);
		return kvs_cli_usage("remote", remote_usage, rc);
	}
	sub = n_pos ? pos[0] : NULL;
	for (need = 0; sub && need < 5; need++)
		if (strcmp(sub, subs[need]) == 0)
			break;
	if (!sub || need == 5) {
		free(pos);
		free(servers);
		if (sub)
			return kvs_cli_usage_error("remote",
						   "unknown command '%s'", sub);
		return kvs_cli_usage_error("remote",
					   "which command? put, get, exists, "
					   "delete or stat");
	}
	if ((strcmp(sub, "stat") == 0 && n_pos != 1) ||
	    (strcmp(sub, "get") == 0 && (n_pos != 2 || !a.out)) ||
	    (strcmp(sub, "stat") != 0 && n_pos < 2)) {
		bool no_out = strcmp(sub, "get") == 0 && n_pos == 2;

		free(pos);
		free(servers);
		return kvs_cli_usage_error(
			sub, "%s",
			no_out ? "where to? (--out FILE "
				 "missing)"
			       : "wrong number of arguments");
	}
	if (connect_to(sub, &a, &c)) {
		free(pos);
		free(servers);
		return KVS_EXIT_FAIL;
	}
	if (strcmp(sub, "put") == 0)
		rc = remote_put(c, &a, (char **)pos + 1, n_pos - 1);
	else if (strcmp(sub, "get") == 0)
		rc = remote_get(c, &a, (char **)pos + 1, n_pos - 1);
	else if (strcmp(sub, "stat") == 0)
		rc = remote_stat(c, &a);
	else
		rc = remote_keys(c, sub, (char **)pos + 1, n_pos - 1);
	kvs_client_close(c);
	free(pos);
	free(servers);
	return rc;
}
