/*
 * cmd_store.c - `kvstash store put|get|delete|stat|fsck` on a store
 * directory,
 * through the embedded engine (include/kvstash/store.h).
 *
 * Every invocation is its own process: the DRAM tier lives only as long
 * as the command, the persistent state is the NVMe tier (segment files),
 * rebuilt at each open.  So `put` writes through to NVMe (at least
 * WRITTEN; with --durable, DURABLE before an id is printed; `delete`
 * alike, its tombstones), and `stat`
 * reports this process's counters, which start at open (recovery's
 * corrupt/torn drops included).  stat, get and fsck (without --repair)
 * open the store read-only: they create and change nothing (read-only
 * media work) and share the lock with each other.  Every command waits
 * for another process's lock up to --lock-timeout seconds.  Without
 * --nvme-capacity the NVMe tier is limited by the size of the file system
 * (less room for reclaiming), so that a command without the flag never
 * evicts what an earlier one stored under a larger limit.
 */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cli_kvs.h"
#include "cli_util.h"
#include "cmd.h"
#include "kvstash/store.h"

#define PUT_CHUNK 32

static const char store_usage[] =
	"usage: kvstash store put --dir DIR [--dram-capacity BYTES]\n"
	"                         [--nvme-capacity BYTES] [--durable]\n"
	"                         [--segment-size BYTES] BLOCK...\n"
	"       kvstash store get --dir DIR ID --out FILE\n"
	"       kvstash store delete --dir DIR [--durable] ID...\n"
	"       kvstash store stat --dir DIR [--json]\n"
	"       kvstash store fsck --dir DIR [--repair] [--json]\n"
	"  every command: [--lock-timeout SECONDS] (default 30; 0: do not\n"
	"  wait; negative: for ever)\n"
	"\n"
	"ID: 64 hex digits of the span id, ':' and the layer, as put prints.\n"
	"Capacities take K, M, G or T suffixes (binary).  --nvme-capacity\n"
	"defaults to the size of the file system holding DIR less room for\n"
	"reclaiming: 5% of it or two segments, whichever is more (at most\n"
	"half of it); --segment-size to 32M.  put prints one id per block, in\n"
	"order; with --durable an id is printed only once its block is on the\n"
	"device (fdatasync); put exits 1 if the ids cannot be written to\n"
	"stdout.  get exits 3 on a miss (a block whose record failed a check\n"
	"is a miss, said so).  delete prints one line per id (deleted, or not\n"
	"found: then it exits 3); a deletion survives a restart (--durable: a\n"
	"power loss too, once printed).  stat, get and fsck change nothing.\n"
	"fsck exits 1 when bad or missing records remain (run it again with\n"
	"--repair to drop them).\n";

struct store_args {
	const char *dir, *out;
	uint64_t dram, nvme, segment;
	double lock_timeout;
	bool durable, json, repair;
};

/* Size of the file system holding @dir (or its parent, not made yet), less
 * room for reclaiming (5%, at least two segments of @segment bytes). */
static uint64_t fs_capacity(const char *dir, uint64_t segment)
{
	struct statvfs vfs;
	char *copy;
	int err = statvfs(dir, &vfs);

	if (err) {
		copy = strdup(dir);
		err = copy ? statvfs(dirname(copy), &vfs) : -1;
		free(copy);
	}
	if (err)
		return 1ull << 40;
	uint64_t size = (uint64_t)vfs.f_blocks * vfs.f_frsize;
	uint64_t room = size / 20 > 2 * segment ? size / 20 : 2 * segment;

	return size > 2 * room ? size - room : size / 2;
}

struct progress {
	const char *cmd;
	double last;
	bool shown;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A long scan says how far it is, every second, on a terminal. */
static void show_progress(void *arg, uint64_t done, uint64_t total)
{
	struct progress *p = arg;
	double t = now_s();

	if (!isatty(2) || t - p->last < 1.0)
		return;
	if (p->last == 0) {
		p->last = t; /* the first second is quiet */
		return;
	}
	p->last = t;
	p->shown = true;
	fprintf(stderr, "\rkvstash %s: scanning segments: %.1f of %.1f GiB",
		p->cmd, (double)done / (1 << 30), (double)total / (1 << 30));
}

static void end_progress(const struct progress *p)
{
	if (p->shown)
		fputc('\n', stderr);
}

/* The options every command shares. */
static void base_opts(const struct store_args *a, struct kvs_store_opts *o,
		      struct progress *p)
{
	kvs_store_opts_default(o);
	o->lock_timeout_ms = a->lock_timeout < 0 ? -1
			     : a->lock_timeout > 1e6
				     ? 1000000000
				     : (int)(a->lock_timeout * 1000);
	o->progress = show_progress;
	o->progress_arg = p;
}

/* Opens the store: for writing (put creates it), or read-only. */
static int open_store(const char *cmd, const struct store_args *a, bool write,
		      struct kvs_store **out)
{
	struct progress p = { .cmd = cmd };
	struct kvs_store_opts o;
	int err;

	base_opts(a, &o, &p);
	kvs_cli_store_pinning(&o);
	o.dram_capacity = a->dram;
	o.nvme_capacity =
		a->nvme ? a->nvme
			: fs_capacity(a->dir,
				      a->segment ? a->segment : 32ull << 20);
	o.segment_size = a->segment;
	o.create = write;
	o.read_only = !write;
	err = kvs_store_open(a->dir, &o, out);
	end_progress(&p);
	if (err == -ENOENT && !write)
		kvs_cli_error(cmd, "%s: no store there", a->dir);
	else if (err)
		kvs_cli_fail(cmd, err, a->dir);
	return err;
}

/* Puts paths[0..n) as one batch; prints the ids of those acknowledged, in
 * order, up to the first failure.  0 or the failure. */
static int put_chunk(struct kvs_store *s, char **paths, size_t n,
		     enum kvs_durability dur)
{
	uint8_t *objs[PUT_CHUNK] = { NULL };
	size_t lens[PUT_CHUNK];
	int res[PUT_CHUNK], err = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		err = kvs_cli_read_file("store put", paths[i], &objs[i],
					&lens[i]);
		if (err)
			break;
	}
	n = i; /* put what could be read, report the rest */
	if (n)
		kvs_store_put_batch(s, (const uint8_t *const *)objs, lens, n,
				    dur, res);
	for (i = 0; i < n; i++) {
		struct kvs_store_key key;
		char text[KVS_STORE_KEY_TEXT];

		if (res[i]) {
			kvs_cli_fail("store put", res[i], paths[i]);
			err = res[i];
			break;
		}
		kvs_store_key_of(objs[i], lens[i], &key);
		kvs_store_key_format(&key, text);
		printf("%s\n", text);
	}
	/* The ids are the acknowledgement: one that cannot be printed
	 * fails the put, and no more blocks are put. */
	if (kvs_cli_flush_stdout("store put") != 0 && err == 0)
		err = -EIO;
	for (i = 0; i < PUT_CHUNK; i++)
		free(objs[i]);
	return err;
}

static int store_put(int argc, char **argv, struct store_args *a, char **pos,
		     size_t n_pos)
{
	enum kvs_durability dur =
		a->durable ? KVS_DURABILITY_DURABLE : KVS_DURABILITY_WRITTEN;
	struct kvs_store *s;
	int err = 0;

	if (n_pos == 0)
		return kvs_cli_usage_error("store put",
					   "which blocks? (BLOCK missing)");
	if (open_store("store put", a, true, &s))
		return KVS_EXIT_FAIL;
	for (size_t i = 0; i < n_pos && !err; i += PUT_CHUNK)
		err = put_chunk(s, pos + i,
				n_pos - i < PUT_CHUNK ? n_pos - i : PUT_CHUNK,
				dur);
	kvs_store_close(s);
	return err ? KVS_EXIT_FAIL : KVS_EXIT_OK;
}

static int store_get(int argc, char **argv, struct store_args *a, char **pos,
		     size_t n_pos)
{
	struct kvs_store_key key;
	struct kvs_store_ref *ref;
	struct kvs_store *s;
	uint8_t *copy = NULL;
	size_t len = 0;
	int err, rc;

	if (n_pos != 1 || !a->out)
		return kvs_cli_usage_error("store get", "%s",
					   n_pos != 1 ? "which id? (one ID)"
						      : "where to? (--out FILE "
							"missing)");
	if (kvs_store_key_parse(pos[0], &key))
		return kvs_cli_usage_error("store get",
					   "'%s' is not an id (64 hex "
					   "digits, ':' and the layer)",
					   pos[0]);
	if (open_store("store get", a, false, &s))
		return KVS_EXIT_FAIL;
	err = kvs_store_get(s, &key, &ref);
	if (!err) {
		/* the store is let go before the output is written: a slow
		 * reader of --out holds no lock */
		len = kvs_store_ref_len(ref);
		copy = malloc(len ? len : 1);
		if (copy)
			memcpy(copy, kvs_store_ref_data(ref), len);
		else
			err = -ENOMEM;
		kvs_store_ref_release(ref);
	}
	kvs_store_close(s);
	if (err == -KVS_ENOTFOUND || err == -KVS_ECORRUPT) {
		kvs_cli_error("store get", "%s: %s", pos[0],
			      err == -KVS_ECORRUPT
				      ? "corrupt (its record failed a check; "
					"a miss: see kvstash store fsck)"
				      : "not found");
		rc = KVS_EXIT_NOTFOUND;
	} else if (err) {
		rc = kvs_cli_fail("store get", err, pos[0]);
	} else {
		rc = kvs_cli_write_file("store get", a->out, copy, len)
			     ? KVS_EXIT_FAIL
			     : KVS_EXIT_OK;
	}
	free(copy);
	return rc;
}

static int store_delete(int argc, char **argv, struct store_args *a, char **pos,
			size_t n_pos)
{
	enum kvs_durability dur =
		a->durable ? KVS_DURABILITY_DURABLE : KVS_DURABILITY_WRITTEN;
	struct kvs_store_key *keys;
	struct kvs_store *s;
	int *res, rc = KVS_EXIT_OK;

	if (n_pos == 0)
		return kvs_cli_usage_error("store delete",
					   "which ids? (ID missing)");
	keys = calloc(n_pos, sizeof(*keys));
	res = calloc(n_pos, sizeof(*res));
	if (!keys || !res) {
		free(keys);
		free(res);
		kvs_cli_error("store delete", "out of memory");
		return KVS_EXIT_FAIL;
	}
	for (size_t i = 0; i < n_pos; i++)
		if (kvs_store_key_parse(pos[i], &keys[i])) {
			free(keys);
			free(res);
			return kvs_cli_usage_error("store delete",
						   "'%s' is not an id", pos[i]);
		}
	if (open_store("store delete", a, true, &s)) {
		free(keys);
		free(res);
		return KVS_EXIT_FAIL;
	}
	kvs_store_delete_batch(s, keys, n_pos, dur, res);
	kvs_store_close(s);
	for (size_t i = 0; i < n_pos; i++) {
		if (res[i] && res[i] != -KVS_ENOTFOUND) {
			kvs_cli_error("store delete", "%s: %s", pos[i],
				      kvs_strerror(res[i]));
			rc = KVS_EXIT_FAIL;
			continue;
		}
		printf("%s %s\n", pos[i], res[i] ? "not found" : "deleted");
		if (res[i] && rc == KVS_EXIT_OK)
			rc = KVS_EXIT_NOTFOUND;
	}
	if (fflush(stdout) || ferror(stdout)) {
		kvs_cli_error("store delete", "cannot write to stdout");
		rc = KVS_EXIT_FAIL;
	}
	free(keys);
	free(res);
	return rc;
}

static int store_stat(int argc, char **argv, struct store_args *a, char **pos,
		      size_t n_pos)
{
	struct kvs_store_stats st;
	struct kvs_store *s;
	struct kvs_cli_json j;

	if (n_pos)
		return kvs_cli_usage_error("store stat", "unexpected '%s'",
					   pos[0]);
	if (open_store("store stat", a, false, &s))
		return KVS_EXIT_FAIL;
	kvs_store_stats_get(s, &st);
	kvs_store_close(s);
	if (!a->json) {
		printf("dram: %" PRIu64 " blocks, %" PRIu64 " bytes of %" PRIu64
		       "\nnvme: %" PRIu64 " blocks, %" PRIu64
		       " bytes in %" PRIu64 " segments (%" PRIu64
		       " file bytes), %s I/O\ncounters of this process only: "
		       "corrupt dropped: %" PRIu64 ", torn dropped: %" PRIu64
		       ", segments lost: %" PRIu64 "\n",
		       st.dram.blocks, st.dram.bytes, st.dram.capacity,
		       st.nvme.blocks, st.nvme.bytes, st.segments,
		       st.nvme_file_bytes,
		       st.direct_io ? "O_DIRECT" : "buffered",
		       st.corrupt_dropped, st.torn_dropped, st.lost_segments);
		return KVS_EXIT_OK;
	}
	kvs_cli_json_init(&j, stdout);
	kvs_cli_json_object_begin(&j, NULL);
	/* the counters are this process's, since its open: the store
	 * persists none of them */
	kvs_cli_store_stats_json(&j, &st, "process");
	kvs_cli_json_object_end(&j);
	kvs_cli_json_finish(&j);
	return KVS_EXIT_OK;
}

static const char *const fsck_status[] = { "good", "corrupt", "torn", "missing",
					   "leftover" };

static void fsck_record(void *arg, const struct kvs_fsck_record *r)
{
	struct kvs_cli_json *j = arg;
	char text[KVS_STORE_KEY_TEXT];

	if (!j) {
		if (r->status != KVS_FSCK_GOOD)
			printf("segment %" PRIu64 " offset %" PRIu64
			       ": %s (%s)\n",
			       r->segment, r->offset, fsck_status[r->status],
			       r->check);
		return;
	}
	kvs_cli_json_object_begin(j, NULL);
	kvs_cli_json_u64(j, "segment", r->segment);
	kvs_cli_json_u64(j, "offset", r->offset);
	kvs_cli_json_u64(j, "length", r->length);
	kvs_cli_json_str(j, "status", fsck_status[r->status]);
	if (r->check)
		kvs_cli_json_str(j, "check", r->check);
	if (r->key_valid) {
		kvs_store_key_format(&r->key, text);
		kvs_cli_json_str(j, "id", text);
		kvs_cli_json_u64(j, "seq", r->seq);
	}
	kvs_cli_json_bool(j, "superseded", r->superseded);
	if (r->tombstone)
		kvs_cli_json_bool(j, "tombstone", true);
	kvs_cli_json_object_end(j);
}

static int store_fsck(int argc, char **argv, struct store_args *a, char **pos,
		      size_t n_pos)
{
	struct progress p = { .cmd = "store fsck" };
	struct kvs_fsck_report rep;
	struct kvs_store_opts o;
	struct kvs_cli_json j;
	uint64_t bad;
	int err;

	if (n_pos)
		return kvs_cli_usage_error("store fsck", "unexpected '%s'",
					   pos[0]);
	if (a->json) {
		kvs_cli_json_init(&j, stdout);
		kvs_cli_json_object_begin(&j, NULL);
		kvs_cli_json_str(&j, "dir", a->dir);
		kvs_cli_json_array_begin(&j, "records");
	}
	base_opts(a, &o, &p);
	err = kvs_store_fsck(a->dir, a->repair ? KVS_FSCK_REPAIR : 0, &o,
			     fsck_record, a->json ? &j : NULL, &rep);
	end_progress(&p);
	if (a->json) {
		kvs_cli_json_array_end(&j);
		if (!err) {
			kvs_cli_json_u64(&j, "segments", rep.segments);
			kvs_cli_json_u64(&j, "good", rep.good);
			kvs_cli_json_u64(&j, "corrupt", rep.corrupt);
			kvs_cli_json_u64(&j, "torn", rep.torn);
			kvs_cli_json_u64(&j, "superseded", rep.superseded);
			kvs_cli_json_u64(&j, "tombstones", rep.tombstones);
			kvs_cli_json_u64(&j, "missing", rep.missing);
			kvs_cli_json_u64(&j, "leftovers", rep.leftovers);
			kvs_cli_json_u64(&j, "foreign", rep.foreign);
			kvs_cli_json_bool(&j, "superblock_damaged",
					  rep.superblock_damaged);
			kvs_cli_json_bool(&j, "manifest_damaged",
					  rep.manifest_damaged);
			kvs_cli_json_u64(&j, "format_version",
					 rep.format_version);
			kvs_cli_json_u64(&j, "bad_segments", rep.bad_segments);
			kvs_cli_json_u64(&j, "repaired_segments",
					 rep.repaired_segments);
			kvs_cli_json_bool(&j, "repaired", a->repair);
		} else {
			kvs_cli_json_str(&j, "error", kvs_strerror(err));
		}
		kvs_cli_json_object_end(&j);
		kvs_cli_json_finish(&j);
	}
	if (err == -ENOENT) {
		kvs_cli_error("store fsck", "%s: no store there", a->dir);
		return KVS_EXIT_FAIL;
	}
	if (err)
		return kvs_cli_fail("store fsck", err, a->dir);
	if (!a->json)
		printf("%" PRIu64 " segments: %" PRIu64 " good (%" PRIu64
		       " tombstones), %" PRIu64 " corrupt, %" PRIu64
		       " torn, %" PRIu64 " missing, %" PRIu64
		       " superseded, %" PRIu64 " leftovers%s%s%s\n",
		       rep.segments, rep.good, rep.tombstones, rep.corrupt,
		       rep.torn, rep.missing, rep.superseded, rep.leftovers,
		       rep.superblock_damaged ? "; superblock damaged" : "",
		       rep.manifest_damaged ? "; manifest damaged" : "",
		       a->repair && rep.repaired ? " (repaired)" : "");
	/* leftovers lose nothing: an open or --repair removes them */
	bad = rep.corrupt + rep.torn + rep.missing + rep.superblock_damaged +
	      rep.manifest_damaged;
	return bad && !a->repair ? KVS_EXIT_FAIL : KVS_EXIT_OK;
}

int kvs_cmd_store(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*run)(int argc, char **argv, struct store_args *a,
			   char **pos, size_t n_pos);
	} subs[] = {
		{ "put", store_put },	    { "get", store_get },
		{ "delete", store_delete }, { "stat", store_stat },
		{ "fsck", store_fsck },
	};
	struct store_args a = { .dram = 64ull << 20, .lock_timeout = 30 };
	struct kvs_cli_opt opts[] = {
		KVS_OPT_STR("dir", &a.dir, true),
		KVS_OPT_STR("out", &a.out, false),
		KVS_OPT_SIZE("dram-capacity", &a.dram, 0, 0, false),
		KVS_OPT_SIZE("nvme-capacity", &a.nvme, 1u << 20, 0, false),
		KVS_OPT_SIZE("segment-size", &a.segment, KVS_STORE_SEGMENT_MIN,
			     KVS_STORE_SEGMENT_MAX, false),
		KVS_OPT_FLAG("durable", &a.durable),
		KVS_OPT_FLAG("json", &a.json),
		KVS_OPT_FLAG("repair", &a.repair),
		KVS_OPT_DOUBLE("lock-timeout", &a.lock_timeout, false),
	};
	const char **pos;
	char name[32];
	size_t n_pos;
	int rc;

	if (argc >= 2 &&
	    (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0))
		return kvs_cli_usage("store", store_usage, KVS_CLI_HELP);
	for (size_t i = 0; argc >= 2 && i < sizeof(subs) / sizeof(subs[0]);
	     i++) {
		if (strcmp(argv[1], subs[i].name) != 0)
			continue;
		pos = calloc((size_t)argc, sizeof(*pos));
		if (!pos) {
			kvs_cli_error("store", "out of memory");
			return KVS_EXIT_FAIL;
		}
		snprintf(name, sizeof(name), "store %s", subs[i].name);
		rc = kvs_cli_parse(name, argc - 1, argv + 1, opts,
				   sizeof(opts) / sizeof(opts[0]), pos,
				   (size_t)argc, &n_pos);
		if (rc == 0)
			rc = subs[i].run(argc - 1, argv + 1, &a, (char **)pos,
					 n_pos);
		else
			rc = kvs_cli_usage(name, store_usage, rc);
		free(pos);
		return rc;
	}
	if (argc >= 2)
		return kvs_cli_usage_error("store", "unknown subcommand '%s'",
					   argv[1]);
	return kvs_cli_usage_error("store", "which subcommand? put, get, "
					    "delete, stat or fsck");
}
