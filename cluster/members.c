/*
 * members.c - member snapshots (immutable, reference-counted, sorted by
 * id, each member with its placement seed), the JSON value a node puts
 * in etcd, and the checks of names and configs shared by the module.
 */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <xxhash.h>

#include "cluster_internal.h"
#include "kvstash/log.h"

#ifndef KVS_VERSION
#define KVS_VERSION "unknown"
#endif

struct entry {
	struct kvs_cluster_member member;
	uint64_t seed;
};

struct kvs_cluster_members {
	atomic_uint refs;
	uint64_t generation;
	size_t count;
	struct entry entry[];
};

/* ---- names, configs, keys ---- */

bool kvs_cluster_name_valid(const char *name)
{
	size_t len;

	if (name == NULL)
		return false;
	len = strlen(name);
	if (len == 0 || len > KVS_CLUSTER_NAME_MAX)
		return false;
	return strspn(name, "abcdefghijklmnopqrstuvwxyz"
			    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == len;
}

unsigned kvs_cluster_timeout_ms(const struct kvs_cluster_config *config)
{
	return config->timeout_ms ? config->timeout_ms : KVS_CLUSTER_TIMEOUT_MS;
}

int kvs_cluster_config_check(const struct kvs_cluster_config *config)
{
	if (config == NULL || config->endpoints == NULL ||
	    config->endpoints[0] == '\0') {
		kvs_log(KVS_LOG_ERR, "cluster: no etcd endpoints");
		return -EINVAL;
	}
	if (!kvs_cluster_name_valid(config->cluster)) {
		kvs_log(KVS_LOG_ERR,
			"cluster name '%s': 1 to %d of A-Z a-z 0-9 . _ -",
			config->cluster ? config->cluster : "",
			KVS_CLUSTER_NAME_MAX);
		return -EINVAL;
	}
	return 0;
}

void kvs_cluster_nodes_prefix(const char *cluster,
			      char out[KVS_CLUSTER_KEY_MAX])
{
	snprintf(out, KVS_CLUSTER_KEY_MAX, "/kvstash/%s/nodes/", cluster);
}

/* ---- the JSON value ---- */

char *kvs_cluster_member_encode(const struct kvs_cluster_member *member)
{
	json_t *value;
	char *text;

	if (member->capacity > (uint64_t)LLONG_MAX)
		return NULL;
	value = json_pack(
		"{s:s,s:s,s:I,s:I,s:I,s:s}", "id", member->id, "address",
		member->address, "capacity", (json_int_t)member->capacity,
		"protocol", (json_int_t)member->protocol, "start_time",
		(json_int_t)member->start_time, "version", KVS_VERSION);
	if (value == NULL)
		return NULL;
	text = json_dumps(value, JSON_COMPACT);
	json_decref(value);
	return text;
}

static bool address_valid(const char *address)
{
	size_t len = strlen(address);

	if (len == 0 || len > KVS_CLUSTER_ADDRESS_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)address[i] <= ' ' ||
		    (unsigned char)address[i] >= 0x7f)
			return false;
	return true;
}

/* A non-negative integer field no larger than @max. */
static bool int_field(json_t *obj, const char *field, json_int_t max,
		      json_int_t *out)
{
	json_t *v = json_object_get(obj, field);

	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > max)
		return false;
	*out = json_integer_value(v);
	return true;
}

int kvs_cluster_member_decode(const char *id, const uint8_t *value, size_t len,
			      struct kvs_cluster_member *out, const char **why)
{
	struct kvs_cluster_member m;
	json_t *obj, *field;
	json_int_t capacity, protocol, start;
	int err = -EINVAL;

	if (!kvs_cluster_name_valid(id)) {
		*why = "the key's id is not a valid node id";
		return -EINVAL;
	}
	obj = len <= KVS_CLUSTER_VALUE_MAX
		      ? json_loadb((const char *)value, len, 0, NULL)
		      : NULL;
	if (!json_is_object(obj)) {
		*why = "not a JSON object";
		goto undo;
	}
	field = json_object_get(obj, "id");
	if (!json_is_string(field) || strcmp(json_string_value(field), id)) {
		*why = "\"id\" differs from the key";
		goto undo;
	}
	field = json_object_get(obj, "address");
	if (!json_is_string(field) ||
	    !address_valid(json_string_value(field))) {
		*why = "\"address\" missing or not host:port text";
		goto undo;
	}
	if (!int_field(obj, "capacity", LLONG_MAX, &capacity) ||
	    !int_field(obj, "protocol", UINT32_MAX, &protocol) ||
	    !int_field(obj, "start_time", LLONG_MAX, &start)) {
		*why = "\"capacity\", \"protocol\" or \"start_time\" missing "
		       "or out of range";
		goto undo;
	}
	memset(&m, 0, sizeof(m));
	strcpy(m.id, id);
	strcpy(m.address, json_string_value(field));
	m.capacity = (uint64_t)capacity;
	m.protocol = (uint32_t)protocol;
	m.start_time = start;
	*out = m;
	err = 0;
undo:
	json_decref(obj);
	return err;
}

/* ---- snapshots ---- */

static int by_id(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->member.id,
		      ((const struct entry *)b)->member.id);
}

int kvs_cluster_members_create(const struct kvs_cluster_member *list,
			       size_t count, uint64_t generation,
			       struct kvs_cluster_members **out)
{
	struct kvs_cluster_members *m;

	if (count > (SIZE_MAX - sizeof(*m)) / sizeof(struct entry) ||
	    (count > 0 && list == NULL))
		return -EINVAL;
	m = calloc(1, sizeof(*m) + count * sizeof(struct entry));
	if (m == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < count; i++) {
		struct kvs_cluster_member *dst = &m->entry[i].member;

		if (!kvs_cluster_name_valid(list[i].id) ||
		    strnlen(list[i].address, sizeof(dst->address)) ==
			    sizeof(dst->address)) {
			free(m);
			return -EINVAL;
		}
		/* Copy field by field so that padding and the bytes after
		 * the strings are zero (snapshots compare with memcmp). */
		strcpy(dst->id, list[i].id);
		strcpy(dst->address, list[i].address);
		dst->capacity = list[i].capacity;
		dst->protocol = list[i].protocol;
		dst->start_time = list[i].start_time;
		dst->lease = list[i].lease;
		m->entry[i].seed = XXH3_64bits(dst->id, strlen(dst->id));
	}
	qsort(m->entry, count, sizeof(struct entry), by_id);
	for (size_t i = 1; i < count; i++) {
		if (strcmp(m->entry[i - 1].member.id, m->entry[i].member.id) ==
		    0) {
			free(m);
			return -EINVAL;
		}
	}
	atomic_init(&m->refs, 1);
	m->generation = generation;
	m->count = count;
	*out = m;
	return 0;
}

struct kvs_cluster_members *
kvs_cluster_members_ref(struct kvs_cluster_members *members)
{
	atomic_fetch_add(&members->refs, 1);
	return members;
}

void kvs_cluster_members_release(struct kvs_cluster_members *members)
{
	if (members != NULL && atomic_fetch_sub(&members->refs, 1) == 1)
		free(members);
}

size_t kvs_cluster_members_count(const struct kvs_cluster_members *members)
{
	return members->count;
}

const struct kvs_cluster_member *
kvs_cluster_members_get(const struct kvs_cluster_members *members, size_t i)
{
	return i < members->count ? &members->entry[i].member : NULL;
}

long kvs_cluster_members_find(const struct kvs_cluster_members *members,
			      const char *id)
{
	size_t lo = 0, hi = members->count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(id, members->entry[mid].member.id);

		if (c == 0)
			return (long)mid;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -1;
}

uint64_t
kvs_cluster_members_generation(const struct kvs_cluster_members *members)
{
	return members->generation;
}

uint64_t kvs_cluster_members_seed(const struct kvs_cluster_members *members,
				  size_t i)
{
	return members->entry[i].seed;
}

bool kvs_cluster_members_same(const struct kvs_cluster_members *a,
			      const struct kvs_cluster_members *b)
{
	if (a->count != b->count)
		return false;
	for (size_t i = 0; i < a->count; i++) {
		const struct kvs_cluster_member *x = &a->entry[i].member;
		const struct kvs_cluster_member *y = &b->entry[i].member;

		if (strcmp(x->id, y->id) || strcmp(x->address, y->address) ||
		    x->capacity != y->capacity || x->protocol != y->protocol ||
		    x->start_time != y->start_time || x->lease != y->lease)
			return false;
	}
	return true;
}
